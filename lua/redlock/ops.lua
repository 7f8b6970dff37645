--- The single lock's operations, each described once. redlock.server
-- (a Server method each), redlock.detect (mode "auto") and redlock.single
-- (one server) serve every operation listed here, nothing there is written
-- per operation; redlock.quorum (Redlock) sends their scripts with the
-- arguments given here. Internal.
--
-- An entry, keyed by the operation's name (which is also the Server
-- method's, the strategy function's and the operation sets' key):
--   what      its words in an error ("releasing a lock"): a mode without
--             the operation says "server: NAME: <what> needs the server's
--             scripts (legacy mode)", code "server" (cannot)
--   by_token  run by the operations that took the lock of its token (the
--             argument after the key; redlock.detect.ops_for), else by
--             the server's current ones (server.ops)
--   settle    mode "auto" settles the server's mode first (INFO, then the
--             script; redlock.detect's run), else an undecided server runs
--             it as a mode without it would
--   optional  a mode without it answers nothing (nil: the caller does
--             without), instead of cannot's error
--   single    how the one-server strategy reads its answer: "taken" (true,
--             v[, acked] | false, v, where), "flag" (true[, acked] | false,
--             where), or nil (as it is)
--   script    the Redis script (scripts/NAME.lua) that redlock.scripted's
--             form sends, and redlock.quorum sends to every server at once:
--   quorum_args(key, token, ttl_s, unfenced, fence key) -> nkeys, keys...,
--             args... (what the fan-out sends; absent: the operation does
--             not go over Redlock)
--   args      (where, key, token, ...) -> nkeys, keys..., args...: the
--             script-mode form is made from the entry (redlock.scripted
--             sends the script with these, and reads a 1 | 0 answer as
--             true | false), and with single = "flag" its Redlock policy
--             (redlock.quorum: a majority of 1); where: the server, or the
--             Redlock client (both have slot_fences); absent: the forms
--             are written in redlock.scripted and redlock.quorum (an
--             answer that says more: a fence, a hand-off, a validity)
-- The forms themselves are redlock.scripted's (script mode: made from
-- `args`, or written there) and redlock.legacy's (without scripts:
-- WATCH/EXEC, where it has one).
local util = require "redlock.util"

local format = string.format

local _M = {}
local missings = {}
local function nothing() return nil end

--- The error of a server whose operations cannot run `what` (legacy mode):
-- one message for every operation and kind (redlock.quorum.of's too).
-- note: what it ends with (redlock.server's methods add the mode note).
function _M.cannot(server, what, note)
    return nil, format("server: %s: %s needs the server's scripts%s", server.name, what, note or ""), "server"
end

--- What a mode without operation `name` runs instead: nothing for an
-- optional one, else cannot's error.
function _M.missing(name)
    local f = missings[name]
    if not f then
        local op = _M.list[name]
        local what = op.what
        f = op.optional and nothing or function(server) return _M.cannot(server, what) end
        missings[name] = f
    end
    return f
end

local function flag(server, r)
    if r == 1 then return true end
    if r == 0 then return false end
    return util.unexpected(server, "a lock script", r)
end
--- A script's 1 | 0 answer: true | false.
_M.flag = flag

--- The operations, by name.
_M.list = {
    acquire = {
        what = "a lock", settle = true, single = "taken",
        script = "acquire",
        quorum_args = function(key, token, ttl_s, unfenced, fkey)
            if unfenced then return 1, key, token, ttl_s end
            return 2, key, fkey, token, ttl_s
        end,
    },
    release = {
        what = "releasing a lock", by_token = true, settle = true, single = "flag",
        script = "release",
        quorum_args = function(key, token) return 1, key, token end,
    },
    extend = {
        what = "extending a lock", by_token = true, settle = true, single = "flag",
        script = "extend",
        quorum_args = function(key, token, ttl_s) return 1, key, token, ttl_s end,
    },
    -- a waiter leaves the waiters queue (redlock.notify); legacy mode and
    -- an undecided server have no queue
    give_up = { what = "leaving the waiters queue", optional = true, script = "give_up" },
}

return _M
