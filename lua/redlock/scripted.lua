--- Lock operations on one server with the atomic scripts of the C core
-- (csrc/scripts.h): SET NX PX plus the fence INCR in one step,
-- compare-and-delete, compare-and-PEXPIRE. Internal.
local util = require "redlock.util"
local notify = require "redlock.notify"

local companion_key = util.companion_key
local wake_key = notify.wake_key
local format = string.format

local _M = { name = "script" }

local function fence_key(key) return companion_key(key, ":fence") end
_M.fence_key = fence_key

local function unexpected(server, what, r)
    return nil, format("server: %s: unexpected reply to %s (%s)", server.name, what, tostring(r)), "server"
end

function _M.acquire(server, key, token, ttl)
    local r, err, code = server:eval("acquire", 2, key, fence_key(key), token, format("%d", ttl))
    if r == nil then return nil, err, code end
    if type(r) ~= "table" then return unexpected(server, "acquire", r) end
    -- integers compared with ==: 0 is true in Lua
    if r[1] == 1 then return true, r[2] end
    return false, r[2]
end

function _M.release(server, key, token)
    -- the second key makes the script wake one waiter (redlock.notify)
    local r, err, code = server:eval("release", 2, key, wake_key(key), token)
    if r == nil then return nil, err, code end
    return r == 1
end

function _M.extend(server, key, token, ttl)
    local r, err, code = server:eval("extend", 1, key, token, format("%d", ttl))
    if r == nil then return nil, err, code end
    return r == 1
end

--- Blocks until a release wakes us or ms pass (see redlock.notify).
_M.wait = notify.wait

return _M
