--- Readers and writers (opts.shared = true takes a read lock): many
-- readers of a key together, a writer alone. Internal; redlock.lua takes
-- this strategy instead of the client's for a call with shared = true.
--
-- A writer is a single lock (`SET key <token> PX ttl`): writers, single
-- locks and other clients' `SET NX` locks of one key exclude each other.
-- Readers hold the key as a sorted set of token -> expiry with a member
-- "shared" (see scripts/rw_read.lua): while any reader holds, the
-- key exists, so a writer (or `SET key x NX` from another client) finds it
-- held. Readers and writers wait in the single lock's FIFO queue: a writer
-- waiting there keeps later readers out (no writer starvation), the last
-- reader to leave hands the key to the waiting writer, and a writer's
-- release lets the readers at the front of the queue in together.
-- On one server (plain, replicas, Sentinel, Cluster), and over Redlock:
-- a reader holds a majority of the servers, a writer a majority too, and
-- two majorities share a server, where the two cannot both hold. (Over
-- Redlock waiting polls: no queue keeps later readers out.)
local options = require "redlock.options"
local permits = require "redlock.semaphore"
local quorum = require "redlock.quorum"
local notify = require "redlock.notify"

local _M = {}

--- opts.shared: true takes a read lock (a writer is a plain acquire).
options.CALL.shared = options.checks.boolean
options.DEFAULTS.shared = false

--- The strategy of a read lock.
_M.strategy = permits.make("shared", "read lock", { "rw_read", "rw_release_read" }, nil)

local waiters_key, data_key, handoff_key, wake_key, handoff_prefix =
    notify.waiters_key, notify.data_key, notify.handoff_key, notify.wake_key, notify.handoff_prefix

--- The same over Redlock: the scripts sent to every server at once.
_M.quorum = quorum.of {
    what = "a read lock",
    acquire_script = "rw_read",
    acquire_args = function(key, token, ttl_s, unfenced, fkey)
        return 5, key, waiters_key(key), data_key(key), handoff_key(key, token), fkey, token, ttl_s, "0", "w",
            unfenced and "0" or "1"
    end,
    release_script = "rw_release_read",
    release_args = function(key, token, fkey)
        return 5, key, waiters_key(key), data_key(key), wake_key(key), fkey, token, handoff_prefix(key)
    end,
}
_M.quorum.shared = true

return _M
