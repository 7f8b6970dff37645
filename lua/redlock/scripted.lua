--- Lock operations on one server with the atomic scripts of the C core
-- (csrc/scripts.h): SET NX PX plus the fence INCR in one step,
-- compare-and-delete, compare-and-PEXPIRE. Internal.
local util = require "redlock.util"
local notify = require "redlock.notify"

local companion_key, companions, ms_string = util.companion_key, util.companions, util.ms_string
local RESERVE = string.format("%d", notify.RESERVE_MS)
local format = string.format

local _M = { name = "script" }

local function fence_key(key) return companion_key(key, ":fence") end
_M.fence_key = fence_key

local function unexpected(server, what, r)
    return nil, format("server: %s: unexpected reply to %s (%s)", server.name, what, tostring(r)), "server"
end

-- waiting (a string of ms): the caller may wait that long for a release
-- (notified waiting): a refusal then adds it to the waiters the releases
-- wake. again: nil on its first attempt, "1" on later ones (it leaves the
-- waiters when it gets the lock), "2" when it has waited long and asks to
-- be marked next for `waiting` ms; the mark is remembered on server for
-- notify.wait.
function _M.acquire(server, key, token, ttl, waiting, again)
    local r, err, code, stale
    local c = companions(key)
    if not waiting then
        -- the uncontended path: conn:eval as Server:eval would call it
        local conn, ttl_s = server.conn, ms_string(ttl)
        r, err, code, stale = conn:eval("acquire", 2, key, c.fence, token, ttl_s)
        if r == nil and stale then r, err, code = conn:eval("acquire", 2, key, c.fence, token, ttl_s) end
    elseif again then
        r, err, code = server:eval("acquire", 4, key, c.fence, c.next, c.waiters, token, ms_string(ttl),
            waiting, again)
    else
        r, err, code = server:eval("acquire", 4, key, c.fence, c.next, c.waiters, token, ms_string(ttl),
            waiting)
    end
    if r == nil then return nil, err, code end
    if type(r) ~= "table" then return unexpected(server, "acquire", r) end
    -- integers compared with ==: 0 is true in Lua
    if r[1] == 1 then return true, r[2] end
    server.marked = r[3] == 1 and key or nil
    return false, r[2]
end

function _M.release(server, key, token)
    -- 2: waiters announced themselves (redlock.notify); the six-key form
    -- hands the key over to a waiter marked next, or wakes one. After a
    -- release that woke waiters (3), the next one of the same key goes
    -- straight to the six-key form: under contention the extra round trip
    -- would lengthen every hold.
    local c = companions(key)
    local r, err, code, stale
    if server.woke_key ~= key then
        local conn = server.conn
        r, err, code, stale = conn:eval("release", 2, key, c.waiters, token)
        if r == nil and stale then r, err, code = conn:eval("release", 2, key, c.waiters, token) end
        if r ~= 2 then
            if r == nil then return nil, err, code end
            return r == 1
        end
    end
    r, err, code = server:eval("release", 6, key, c.wake, c.next, c.handoff, c.fence, c.waiters,
        token, RESERVE)
    if r == nil then return nil, err, code end
    server.woke_key = r == 3 and key or nil
    if r == 3 then return true end
    return r == 1
end

function _M.extend(server, key, token, ttl)
    local r, err, code = server:eval("extend", 1, key, token, ms_string(ttl))
    if r == nil then return nil, err, code end
    return r == 1
end

--- Blocks until a release wakes us or ms pass (see redlock.notify).
_M.wait = notify.wait

return _M
