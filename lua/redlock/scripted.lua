--- Lock operations on one server with the atomic scripts of the C core
-- (scripts/*.lua): SET NX PX plus the fence in one step,
-- compare-and-delete, compare-and-PEXPIRE. Internal.
local util = require "redlock.util"
local notify = require "redlock.notify"
local replicas = require "redlock.replicas"
local lock_ops = require "redlock.ops"

local companion_key, ms_string = util.companion_key, util.ms_string
local wake_key, data_key, handoff_key, handoff_prefix, waiters_key =
    notify.wake_key, notify.data_key, notify.handoff_key, notify.handoff_prefix, notify.waiters_key
local now = require("redlock.core").now
local refused_at = notify.set_refused_at

local _M = { name = "script" }

-- (the hot paths ask companion_key with the suffix: one call less)
local WAITERS = notify.WAITERS
_M.WAITERS = WAITERS
--- The fence counter of a lock key's server (redlock.util.fence_counter).
local fence_key = util.fence_counter
_M.fence_key = fence_key

local unexpected = util.unexpected

-- conn:eval_wait (the script and WAIT in one write), sent once more on a
-- connection the server had dropped. Returns acked, fsynced, values... |
-- false, message, values... (WAIT failed) | nil, message, code.
local function eval_wait(conn, rep, name, nkeys, ...)
    return conn:eval_wait(name, rep.replicas, rep.replica_timeout, rep.aof, nkeys, ...)
end

-- What an acknowledged write (the script's answer `r` is 1 when it wrote)
-- comes to: true, acked | nil, message, code when WAIT failed or too few
-- acknowledged (then undo() takes the write back, if it wrote).
local function acknowledged(server, rep, wrote, acked, fsynced, what, undo)
    -- the script ran, whatever WAIT answers: mode auto is decided
    -- (redlock.detect; a refused WAIT says nothing about scripting)
    server.script_ran = true
    local msg, code
    if acked == false then
        msg, code = replicas.wait_failed(server.name, rep, fsynced)
    else
        msg, code = replicas.shortfall(server.name, rep, acked, fsynced, what), "replicas"
        if not msg then return true, acked end
    end
    if wrote and undo then return nil, replicas.released(msg, undo()), code end
    return nil, msg, code
end

-- acquire with rep (replica acknowledgement): as _M.acquire, with WAIT in
-- the same write; a lock taken but not acknowledged is released (fail
-- closed). true, fence, acked | false, pttl | nil, err, code.
local function acquire_acked(server, key, token, ttl, waiting, _, unfenced, rep)
    local conn, ttl_s = server.conn, ms_string(ttl)
    local acked, fsynced, taken, v, at
    if not waiting then
        if unfenced then
            acked, fsynced, taken, v, at = eval_wait(conn, rep, "acquire", 1, key, token, ttl_s)
        else
            acked, fsynced, taken, v, at = eval_wait(conn, rep, "acquire", 2, key,
                fence_key(key, server.slot_fences), token, ttl_s)
        end
    else
        -- (a lock that waits for replicas is never handed over: the
        -- release's connection could not WAIT for its write)
        local wkey, dkey, hkey = waiters_key(key), data_key(key), handoff_key(key, token)
        if unfenced then
            acked, fsynced, taken, v, at = eval_wait(conn, rep, "acquire", 4, key, wkey, dkey, hkey, token,
                ttl_s, waiting, "w")
        else
            acked, fsynced, taken, v, at = eval_wait(conn, rep, "acquire", 5, key, wkey, dkey, hkey,
                fence_key(key, server.slot_fences), token, ttl_s, waiting, "w")
        end
    end
    if acked == nil then return nil, fsynced, taken end -- the script did not answer
    local wrote = taken == 1 and v ~= nil
    if acked ~= false and not wrote then return _M.answer(server, taken, v, at) end
    local ok, n, code = acknowledged(server, rep, wrote, acked, fsynced, "the lock",
        function() return _M.release(server, key, token) end)
    if ok then return true, v, n end
    return nil, n, code
end

-- waiting (a string of ms): the caller may wait that long for a release
-- (notified waiting): a refusal then puts it in the waiters queue, whose
-- releases hand it the lock or wake it (redlock.notify). handoff: it
-- blocks on its own hand-off list (notify.wait with its token), so a
-- release may hand it the lock; else it is only woken. unfenced: no fence
-- is asked for (fence = false): the script touches no counter, and the
-- fence answered is 0. rep: the options of a lock that waits for replicas
-- (redlock.replicas), else nil; a lock taken then answers true, fence,
-- acked.
function _M.acquire(server, key, token, ttl, waiting, handoff, unfenced, rep)
    if rep then return acquire_acked(server, key, token, ttl, waiting, handoff, unfenced, rep) end
    -- the script answers {1, fence} (taken) or {0, pttl[, server ms]}
    -- (refused), as values; a failure is nil, message, code (, stale)
    local conn, ttl_s = server.conn, ms_string(ttl)
    local taken, v, at
    if not waiting then
        -- the uncontended path
        if unfenced then
            taken, v, at = conn:eval_values("acquire", 1, key, token, ttl_s)
        else
            local fkey = fence_key(key, server.slot_fences)
            taken, v, at = conn:eval_values("acquire", 2, key, fkey, token, ttl_s)
        end
    else
        -- a waiter: the waiters queue and data, its hand-off list, then the counter
        local wkey, dkey, hkey = waiters_key(key), data_key(key), handoff_key(key, token)
        local how = _M.how(server, handoff, key, token)
        if unfenced then
            taken, v, at = conn:eval_values("acquire", 4, key, wkey, dkey, hkey, token, ttl_s, waiting, how)
        else
            taken, v, at = conn:eval_values("acquire", 5, key, wkey, dkey, hkey,
                fence_key(key, server.slot_fences), token, ttl_s, waiting, how)
        end
    end
    return _M.answer(server, taken, v, at)
end

--- How a waiter (token) of key joins the waiters queue (ARGV[4] of
-- scripts/acquire.lua; every kind's acquire script takes the same): "h"
-- handed the lock or permit on its hand-off list, "p" (inside nginx,
-- server.handoff_how says, redlock.nginx.cosocket) by a message to its worker's
-- subscriber, "w" woken only. handoff: the caller may be handed it (see
-- _M.acquire); a server that refused BLPOP is polled, so only woken.
-- give_back: its kind's release, nil for a single lock's (see
-- redlock.nginx.wait).
function _M.how(server, handoff, key, token, give_back)
    if not handoff or server.no_notify then return "w" end
    local f = server.handoff_how
    return f and f(server, key, token, give_back, handoff) or "h"
end

local FENCE_COUNTER = util.FENCE_COUNTER

--- The uncontended acquire without a script: SET NX PX and, for a fence,
-- the counter's XADD (raised to the server's clock by the server itself,
-- scripts/parts/fence.lua), in one round trip (conn:grant; inside nginx the
-- cosocket transport's, redlock.nginx.cosocket), on a server whose connection
-- can (not a Cluster, and once a script ran on this very connection:
-- server.grants; inside nginx, with no pooled connection made since).
-- Returns true, fence[, t] (t: now() after the answer, when fenced) |
-- false (refused: held by another; the pttl is not known) | nil, err,
-- code | "script", set when the caller must ask the acquire script
-- instead, with the same token; set: the key may hold our token (the
-- script takes it as ours, with a fence of its own; should the script
-- fail, the caller gives it back): the XADD's ID gave no fence (a seq over
-- 99, a string counter from before Redis 5, no streams, XADD refused),
-- its answer came too late, or its reply was lost.
-- ttl_s: the ttl as a string (ms_string); valid_until: when the lock's
-- validity ends. XADD runs after the SET, but maybe not right after it:
-- had the key expired in between, a next holder's XADD could have come
-- first. Then the answer comes after the validity ran out, and its fence
-- is not used.
function _M.grant(server, key, token, ttl_s, unfenced, valid_until)
    local conn = server.conn
    -- (Server counters only: server.grants is false on a Cluster)
    local taken, fence, msg, stale = conn:grant(key, token, ttl_s, not unfenced and FENCE_COUNTER or nil,
        server.grants)
    if taken == 1 then
        if unfenced then return true, 0 end
        if not fence or fence == -2 then
            -- -2: no streams (before Redis 5), the script's counter; false:
            -- another XADD error (no permission, a proxy's own refusal),
            -- which the script's XADD may not meet, else it fails, and the
            -- key is given back (redlock.lua). Either way this connection
            -- asks the script from now on; a new one (a failover, an
            -- upgraded server) tries again (see answer).
            server.grants, server.grants_off = false, conn:connects()
            return "script", true
        end
        if fence < 0 then return "script", true end
        local t = now()
        if t >= valid_until then return "script", true end
        return true, fence, t
    end
    if taken == 0 then return false end
    -- (a new connection since a script ran: the script asks first)
    if taken == -3 then server.grants = false return "script", false end
    -- (a failure: nil, message, code, stale)
    if stale then return "script", true end -- the script path retries
    return nil, fence, msg
end

--- What the acquire script's answer (or the failure to get one) means:
-- true, fence | false, pttl | nil, err, code. (redlock.lua sends the
-- uncontended request of one server itself; see its acquire.)
-- A waiter's refusal also says the server's time (ms), which a hand-off's
-- validity counts from (redlock.notify): kept in server.refused_at.
function _M.answer(server, taken, v, at)
    -- integers compared with ==: 0 is true in Lua
    if taken == 1 and v then
        -- scripting works on this connection: the next acquire on it may go
        -- without a script (unless grant turned that off on it)
        if server.can_grant then
            local on = server.conn:connects()
            if server.grants ~= on and server.grants_off ~= on then server.grants = on end
        end
        return true, v
    end
    if taken == 0 and v then
        if at then refused_at(server, at) end
        return false, v
    end
    if taken == nil then return nil, v, at end
    -- (a semaphore's key: see redlock.semaphore)
    if taken == 2 then return util.misuse(nil, v, nil, server) end
    return unexpected(server, "acquire", taken)
end

-- bound: ms (a string) under which the front waiter's wait lets the key
-- go free and wakes it to compete (redlock.notify.BARGE_MS); nil: the
-- release hands the key to the front waiter whatever its wait (fair).
function _M.release(server, key, token, bound)
    -- 2: waiters announced themselves (redlock.notify); the five-key form
    -- hands the lock to the one at the front, or wakes it. After a
    -- release that woke waiters (3), the next one of the same key goes
    -- straight to the five-key form: under contention the extra round trip
    -- would lengthen every hold.
    if server.woke_key ~= key then
        local r, err, code = server.conn:eval("release", 2, key, companion_key(key, WAITERS), token)
        if r ~= 2 then
            if r == nil then return nil, err, code end
            return r == 1
        end
    end
    return _M.release_waking(server, key, token, bound)
end

--- The five-key release, which wakes the waiters the two-key one answered 2
-- for (see _M.release).
function _M.release_waking(server, key, token, bound)
    local r, err, code
    if bound then
        r, err, code = server:eval("release", 5, key, waiters_key(key), data_key(key), wake_key(key),
            fence_key(key, server.slot_fences), token, handoff_prefix(key), bound)
    else
        r, err, code = server:eval("release", 5, key, waiters_key(key), data_key(key), wake_key(key),
            fence_key(key, server.slot_fences), token, handoff_prefix(key))
    end
    if r == nil then return nil, err, code end
    server.woke_key = r == 3 and key
    if r == 3 then return true end
    return r == 1
end

-- rep: as for acquire; an extend that replicas did not acknowledge is
-- not undone (the key keeps the new ttl on the master) but fails with
-- "replicas": the lock keeps the validity it had (see redlock.lua).
function _M.extend(server, key, token, ttl, rep)
    if rep then
        local acked, fsynced, r = eval_wait(server.conn, rep, "extend", 1, key, token, ms_string(ttl))
        if acked == nil then return nil, fsynced, r end
        if r ~= 1 then return false end
        return acknowledged(server, rep, true, acked, fsynced, "the extension", nil)
    end
    local r, err, code = server:eval("extend", 1, key, token, ms_string(ttl))
    if r == nil then return nil, err, code end
    return r == 1
end

--- A waiter that gives up leaves the waiters queue at once (best effort,
-- bounded by the server's timeout; the queue expires anyway). A lock handed
-- to it meanwhile is its own: "handed", fence, since (as notify.wait), or
-- "held" when the key holds its token but the hand-off's element was lost
-- (its fence unknown: the caller releases it); otherwise nothing. Leaving
-- from the front of the queue wakes the waiters behind (GIVE_UP).
-- Inside nginx a waiter is handed its lock by a message to its worker's
-- subscriber, not a list element: a waiter that gives up at its deadline
-- as a release hands it the lock takes it with that message
-- (Server:handed_late; give_back: its kind's release, nil a single
-- lock's, for a request that ends meanwhile); gone: the waiter's request
-- has ended (redlock.nginx.wait gives the lock back), nobody takes it.
function _M.give_up(server, key, token, give_back, gone)
    local r = server:eval("give_up", 5, key, waiters_key(key), data_key(key), handoff_key(key, token),
        wake_key(key), token)
    if r == "held" then
        if server.handed_late and not gone then
            local handed, fence, since = server:handed_late(key, token, give_back)
            if handed then return handed, fence, since end
        end
        return "held"
    end
    if type(r) == "string" then
        local fence, since = notify.handed(server, r)
        if fence then return "handed", fence, since end
        return "held"
    end
end

--- Blocks until a release wakes us or ms pass (see redlock.notify).
_M.wait = notify.wait

-- The forms made from redlock.ops's entries that give their script's
-- arguments (`args`) and have no form written above.
for name, op in pairs(lock_ops.list) do
    if op.args and not _M[name] then
        local script, args, flag = op.script, op.args, lock_ops.flag
        _M[name] = function(server, ...)
            local r, err, code = server:eval(script, args(server, ...))
            if r == nil then return nil, err, code end
            return flag(server, r)
        end
    end
end

return _M
