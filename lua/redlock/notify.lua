--- Notified waiting on one server: instead of polling, a waiter blocks in
-- BLPOP on the lock's wake-up list, which the release script refills with
-- one element. Internal.
--
-- The BLPOP runs on a connection of its own per server (a clone of the
-- server's, made on first use), whose reply timeout is raised to the BLPOP
-- timeout plus the usual one for each wait: a server that stops answering is
-- still noticed. The caller bounds each wait by the holder's PTTL and its
-- own deadline, so a lost wake-up or a crashed holder costs at most that.
local options = require "redlock.options"
local util = require "redlock.util"

local companion_key = util.companion_key
local format, ceil = string.format, math.ceil

local _M = {}

--- notify = false makes acquire poll (retry_delay + jitter) as before: for
-- keys that holders outside this library release, who push no wake-up.
options.CALL.notify = options.checks.boolean
options.DEFAULTS.notify = true

--- The wake-up list of a lock key: same hash slot as the key.
function _M.wake_key(key) return companion_key(key, ":wake") end
local wake_key = _M.wake_key

local function blpop(conn, key, ms)
    -- seconds with ms resolution: Redis >= 6 takes a fraction; 0 would
    -- block forever, so ms is at least 1
    return conn:command("BLPOP", wake_key(key), format("%.3f", ms / 1000))
end

--- Blocks until a release of `key` wakes this waiter or `ms` pass.
-- Returns true when it waited (woken or not); nil when it could not, and
-- the caller sleeps instead: no connection, or a server that refuses BLPOP
-- with a fractional timeout (before Redis 6), which then polls for good.
function _M.wait(server, key, ms)
    if server.no_notify then return nil end
    local conn = server.waiter
    if conn == nil then
        conn = server.conn:clone()
        if not conn then return nil end
        server.waiter, server.waiter_timeout = conn, conn:timeout()
    end
    ms = ceil(ms)
    if ms < 1 then ms = 1 end
    conn:set_timeout(ms + server.waiter_timeout)
    local r, _, code, stale = blpop(conn, key, ms)
    if r == nil and stale then r, _, code = blpop(conn, key, ms) end
    if r == nil then
        if code == "server" then server.no_notify = true end
        return nil
    end
    return true
end

return _M
