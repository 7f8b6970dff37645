--- Lock operations on one server with the atomic scripts of the C core
-- (csrc/scripts.h): SET NX PX plus the fence INCR in one step,
-- compare-and-delete, compare-and-PEXPIRE. Internal.
local util = require "redlock.util"
local notify = require "redlock.notify"

local companion_key, ms_string = util.companion_key, util.ms_string
local wake_key, next_key, handoff_key = notify.wake_key, notify.next_key, notify.handoff_key
local RESERVE = string.format("%d", notify.RESERVE_MS)
local format, ceil = string.format, math.ceil

local _M = { name = "script" }

local function fence_key(key) return companion_key(key, ":fence") end
_M.fence_key = fence_key

local function unexpected(server, what, r)
    return nil, format("server: %s: unexpected reply to %s (%s)", server.name, what, tostring(r)), "server"
end

-- claim: ms the caller (a waiter that waited long) asks to be marked next
-- for; the mark is remembered on server for notify.wait.
function _M.acquire(server, key, token, ttl, claim)
    local r, err, code
    if claim then
        r, err, code = server:eval("acquire", 3, key, fence_key(key), next_key(key), token,
            ms_string(ttl), format("%d", ceil(claim)))
    else
        r, err, code = server:eval("acquire", 2, key, fence_key(key), token, ms_string(ttl))
    end
    if r == nil then return nil, err, code end
    if type(r) ~= "table" then return unexpected(server, "acquire", r) end
    -- integers compared with ==: 0 is true in Lua
    if r[1] == 1 then return true, r[2] end
    server.marked = r[3] == 1 and key or nil
    return false, r[2]
end

function _M.release(server, key, token)
    -- the other keys let the script hand over to a waiter marked next, or
    -- wake one waiter (redlock.notify)
    local r, err, code = server:eval("release", 5, key, wake_key(key), next_key(key), handoff_key(key),
        fence_key(key), token, RESERVE)
    if r == nil then return nil, err, code end
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
