--- Readers and writers (opts.shared = true takes a read lock): many
-- readers of a key together, a writer alone. Internal; redlock.lua takes
-- this strategy instead of the client's for a call with shared = true.
--
-- A writer is a single lock (`SET key <token> PX ttl`): writers, single
-- locks and other clients' `SET NX` locks of one key exclude each other.
-- Readers hold the key as a sorted set of token -> expiry with a member
-- "shared" (see RW_READ in csrc/scripts.h): while any reader holds, the
-- key exists, so a writer (or `SET key x NX` from another client) finds it
-- held. Readers and writers wait in the single lock's FIFO queue: a writer
-- waiting there keeps later readers out (no writer starvation), the last
-- reader to leave hands the key to the waiting writer, and a writer's
-- release lets the readers at the front of the queue in together.
-- One server only (plain, replicas, Sentinel, Cluster).
local options = require "redlock.options"
local permits = require "redlock.semaphore"

local _M = {}

--- opts.shared: true takes a read lock (a writer is a plain acquire).
options.CALL.shared = options.checks.boolean
options.DEFAULTS.shared = false

--- The strategy of a read lock.
_M.strategy = permits.make("shared", "read lock", { "rw_read", "rw_release_read" }, nil)

return _M
