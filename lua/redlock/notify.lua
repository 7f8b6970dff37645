--- Notified waiting on one server: instead of polling, a waiter blocks in
-- BLPOP on the lock's wake-up list, which the release script refills with
-- one element. Internal.
--
-- Each refused attempt of a waiter adds its token to the lock's waiters set
-- (in the same atomic step as the refusal; the set lives as long as any
-- member may wait, and a waiter leaves it when it gets the lock), so a
-- release wakes somebody only when somebody may be waiting: the uncontended
-- release does no wake-up work.
--
-- Barging is bounded: a waiter that has waited FAIR_AFTER ms asks to be
-- marked "next" (one at a time); the release then hands the key straight to
-- its token, reserved for RESERVE_MS, and wakes it through a hand-off list
-- only it blocks on. Its next attempt finds its own token and sets its ttl
-- (see the ACQUIRE and RELEASE scripts in csrc/scripts.h).
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

--- A waiter asks to be next after waiting this long (ms).
_M.FAIR_AFTER = 2
--- How long a hand-off reserves the key for the waiter marked next (ms).
_M.RESERVE_MS = 200

--- The companion keys of a lock key, in its hash slot: the wake-up list,
-- the "next" mark, the hand-off list and the waiters set (see above).
-- (WAITERS: the suffix, for the release that asks companion_key itself)
_M.WAITERS = ":waiters"
function _M.wake_key(key) return companion_key(key, ":wake") end
function _M.next_key(key) return companion_key(key, ":next") end
function _M.handoff_key(key) return companion_key(key, ":handoff") end
function _M.waiters_key(key) return companion_key(key, _M.WAITERS) end
local wake_key, handoff_key = _M.wake_key, _M.handoff_key

local function blpop(conn, key, ms, marked)
    -- seconds with ms resolution: Redis >= 6 takes a fraction; 0 would
    -- block forever, so ms is at least 1
    local secs = format("%.3f", ms / 1000)
    if marked then return conn:command("BLPOP", handoff_key(key), wake_key(key), secs) end
    return conn:command("BLPOP", wake_key(key), secs)
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
    local marked = server.marked == key -- set by the last failed attempt
    local r, _, code, stale = blpop(conn, key, ms, marked)
    if r == nil and stale then r, _, code = blpop(conn, key, ms, marked) end
    if r == nil then
        if code == "server" then server.no_notify = true end
        return nil
    end
    return true
end

return _M
