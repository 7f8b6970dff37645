--- Notified waiting (on one server; Redlock's waiters: redlock.quorum.wait),
-- with a direct hand-off: instead of
-- polling, a waiter blocks in BLPOP until the holder's release either hands
-- it the lock or wakes it. Internal.
--
-- Each refused attempt of a waiter puts its token in the lock's waiters
-- queue (at the back the first time; in the same atomic step as the
-- refusal; the queue lives as long as any member counts as waiting, and a
-- waiter leaves it when it gets the lock or gives up), so a release does
-- hand-off or wake-up work only when somebody may be waiting: the
-- uncontended release does none.
--
-- The direct hand-off: a waiter that blocks on a connection of its own
-- (this module) blocks on its own hand-off list. The release that finds it
-- at the front of the queue gives it the lock in the same atomic step (the
-- key then holds its token for its ttl, with a new fence) and pushes
-- "fence server-ms" to that list: BLPOP's answer is the lock, and no claim
-- round trip follows. Waiters are served in queue order, so none is
-- starved and newcomers cannot barge in while anybody waits. A waiter that
-- only wants to be woken (inside nginx, where one subscriber per worker
-- wakes them, redlock.nginx.wait; or one whose lock must wait for replicas)
-- gets the key deleted and the wake-up list filled instead, and tries again.
-- See the scripts scripts/acquire.lua and scripts/release.lua.
--
-- The validity of a handed lock: the key holds it for its ttl from the
-- release, which came after the waiter's last refused attempt (sent at t0,
-- answered at server time S0); the release's element says its server time
-- S1, so the lock counts from t0 + (S1 - S0) x (1 - drift) on this
-- client's clock: the server's own clock measured the wait, as it measures
-- the ttl (redlock.lua).
--
-- The BLPOP runs on a connection of its own per server (a clone of the
-- server's, made on first use), whose reply timeout is raised to the BLPOP
-- timeout plus the usual one for each wait: a server that stops answering is
-- still noticed. The caller bounds each wait by the holder's PTTL and its
-- own deadline, so a lost wake-up or a crashed holder costs at most that.
local core = require "redlock.core"
local options = require "redlock.options"
local util = require "redlock.util"

local companion_key, now, topo_reply = util.companion_key, core.now, core.topo_reply
local format, find, match, tonumber, type = string.format, string.find, string.match, tonumber, type
local ceil, floor = math.ceil, math.floor
local running = coroutine.running

local _M = {}

--- notify = false makes acquire poll (retry_delay + jitter) as before: for
-- keys that holders outside this library release, who push no wake-up.
options.CALL.notify = options.checks.boolean
options.DEFAULTS.notify = true

--- fair = true: every release hands the lock to the front waiter (a strict
-- queue); false: a release whose front waiter has waited less than
-- BARGE_MS leaves the key free and wakes that waiter to compete, so that
-- the next acquirer, the releasing process included, takes it at once.
options.CALL.fair = options.checks.boolean
options.DEFAULTS.fair = false

--- The bound (ms, as the release script reads it) of fair = false: a
-- waiter that has waited this long (the server's clock, from its first
-- refused attempt) is handed the lock by the next release, before any
-- newcomer.
_M.BARGE_MS = "1"

--- A waiter woken to compete waits this many of its round trips before it
-- tries: the releasing process, which usually takes the lock straight back,
-- then does so without a wake-up on its way (a free lock waits that long
-- for the waiter when nobody else comes). (_M.WOKEN_MS, when set: that
-- many ms instead, to tune it: bench/contended.lua)
_M.WOKEN_RTTS = 1

--- A waiter blocks at most this long (ms) before it asks again, which
-- renews its place in the queue: its place lasts that long and a second
-- more (see scripts/acquire.lua), so a waiter that died is skipped
-- by the releases that come 2 s after it died, or later, whatever the
-- holder's ttl.
_M.RECHECK_MS = 1000

--- The companion keys of a lock key, in its hash slot: the waiters queue,
-- the waiters' data, the wake-up list, and each waiter's hand-off list
-- (the release names it: HANDOFF, then the waiter's token).
-- (WAITERS: the suffix, for the release that asks companion_key itself)
_M.WAITERS = ":waiters"
_M.HANDOFF = ":handoff:"
function _M.waiters_key(key) return companion_key(key, _M.WAITERS) end
function _M.data_key(key) return companion_key(key, ":waiting") end
function _M.wake_key(key) return companion_key(key, ":wake") end
function _M.handoff_prefix(key) return companion_key(key, _M.HANDOFF) end
function _M.handoff_key(key, token) return companion_key(key, _M.HANDOFF) .. token end
local wake_key, handoff_key = _M.wake_key, _M.handoff_key

-- The key of the caller's own refusal time inside nginx (server.refused_by:
-- requests share the server, each has its own), or nil: outside nginx,
-- and in nginx's phases that run outside any coroutine (init, set, the
-- filters, log, balancer: nothing yields there, so server.refused_at,
-- set last, is the caller's).
local function refused_by(server)
    local by = server.refused_by
    local co = by and running()
    if co then return by, co end
end

--- The server ms of the caller's last refused attempt (redlock.scripted),
-- or nil.
function _M.refused_at(server)
    local by, co = refused_by(server)
    if by then return by[co] end
    return server.refused_at
end
local refused_at_of = _M.refused_at

--- Notes the server ms of the caller's refused attempt (a waiter's, from
-- the acquire script's answer), which a hand-off counts from.
function _M.set_refused_at(server, at)
    server.refused_at = at
    local by, co = refused_by(server)
    if by then by[co] = at end
end

--- What a hand-off's element says: the fence (0 when none was asked for)
-- and the server ms since the waiter's last refused attempt (_M.refused_at);
-- nil when the hand-off came before that attempt: a refusal means the
-- key did not hold the waiter's token (ACQUIRE finds its own), so the
-- lock handed before it has gone on. refused_at: that attempt's server ms,
-- when the caller knows it.
function _M.handed(server, element, refused_at)
    local fence, at = match(element, "^(%d+) (%d+)$")
    if not fence then return nil end
    -- unknown (no TIME): 0, the lock counts from before the last attempt
    refused_at = refused_at or refused_at_of(server) or 0
    if refused_at <= 0 then return tonumber(fence), 0 end
    local since = tonumber(at) - refused_at
    if since < 0 then return nil end
    return tonumber(fence), since
end

--- How late a server may answer a BLPOP that timed out (ms): it looks at
-- blocked clients' timeouts when its event loop wakes, at the latest at
-- its next timer tick (hz 10).
local TICK_MS = 100

local function blpop(conn, key, token, secs)
    if token then return conn:command("BLPOP", handoff_key(key, token), wake_key(key), secs) end
    return conn:command("BLPOP", wake_key(key), secs)
end

-- Redis before 6.0 takes BLPOP's timeout in whole seconds only, and says
-- so: "ERR timeout is not an integer or out of range".
local WHOLE_SECONDS_BEFORE = 60000
local function whole_seconds_only(err)
    return type(err) == "string" and find(err, "not an integer", 1, true) ~= nil
end

-- An error that ends a block without refusing BLPOP (the topology core's
-- rules): the server turned replica while the waiter blocked ("UNBLOCKED
-- ... instance state changed", Redis 2.8+) or is one now (READONLY), or
-- CLIENT UNBLOCK ... ERROR. The waiter counts as woken: its next attempt
-- goes the usual way (to the new master, under Sentinel) and it blocks
-- again once a master refuses it.
local function woken(err) return topo_reply("unblocked", err) or topo_reply("demoted", err) end

-- A refusal of BLPOP itself, for good: the command is unknown (renamed
-- away, a proxy without it) or the ACL denies it (NOPERM). Any other error
-- (LOADING, BUSY, a wrong type...) passes: this wait is polled, the next
-- one blocks again.
local function refused(err)
    return type(err) == "string"
        and (find(err, "unknown command", 1, true) or find(err, "NOPERM", 1, true)) ~= nil
end

-- BLPOP's timeout for a block of at most ms (>= 1): seconds with ms
-- resolution ("0.250"; 0 would block forever), or on a server that takes
-- whole seconds only the whole seconds within ms ("1"), nil under one:
-- a block never outlasts ms, so neither the waiter's deadline nor the
-- holder's expiry is overrun.
local function timeout(server, ms)
    if server.blpop_whole == nil then
        -- known without asking when mode auto asked the version (INFO)
        local version = server.caps and server.caps.version
        if version then server.blpop_whole = version < WHOLE_SECONDS_BEFORE end
    end
    if not server.blpop_whole then return format("%.3f", ms / 1000) end
    if ms < 1000 then return nil end
    return format("%d", floor(ms / 1000))
end

--- Blocks until a release of `key` hands this waiter the lock, wakes it, or
-- `ms` pass. token: the waiter's, when it may be handed the lock (it
-- blocks on its own hand-off list, and on the wake-up list, which a
-- release fills when it cannot hand over: see RELEASE), else nil (it
-- blocks on the wake-up list). Returns true when it waited (woken or not;
-- "woken" when a release that left the key free woke it to compete: see
-- scripts/parts/serve_queue.lua); "handed", fence, since
-- (see _M.handed) when it holds the lock now; nil when it could not wait,
-- and the caller sleeps instead: no connection; a server that refuses
-- BLPOP (renamed away, ACL), which then polls for good (a block that the
-- server ended as it turned replica is no refusal: true, see woken; other
-- errors make this wait polled, see refused); or, on a server
-- whose BLPOP takes whole seconds only (before Redis 6.0: found from its
-- version, or from its first refusal of a fraction), a wait under a
-- second (the last second before the holder's expiry or the waiter's
-- deadline), which is polled; a lock handed meanwhile is the waiter's
-- next attempt's (ACQUIRE finds its own token).
-- final: ms ends at the caller's deadline, which a late answer would
-- overrun (by up to a tick of the server's timer): the wait ends on this
-- side at ms, the connection closed with the BLPOP still blocked (the
-- server drops it; a hand-off that came in that instant is found by the
-- waiter's GIVE_UP, which follows), and answers true.
function _M.wait(server, key, ms, token, final)
    if server.no_notify then return nil end
    ms = ceil(ms)
    if ms < 1 then ms = 1 end
    if not timeout(server, ms) then return nil end
    local conn = server.waiter
    if conn == nil then
        conn = server.conn:clone()
        if not conn then return nil end
        server.waiter, server.waiter_timeout = conn, conn:timeout()
    end
    if final and not conn:connected() then
        -- (re)connected first, its time taken from the wait: the cut below
        -- counts from the BLPOP sent
        local t = now()
        if conn:command("PING") == nil then return nil end
        ms = ms - (now() - t)
        if ms < 1 then return true end
        ms = ceil(ms)
    end
    -- (a final block is cut on this side at ms: the server may take a tick more)
    local secs = timeout(server, final and ms + TICK_MS or ms)
    if not secs then return nil end
    conn:set_timeout(final and ms or ms + server.waiter_timeout)
    -- (a stale connection is sent again once by the conn itself)
    local r, err, code, stale = blpop(conn, key, token, secs)
    if r == nil and final and code == "connection" and find(err, "timed out", 1, true) then return true end
    -- the sentinels announced a failover: try again at once, on the new master
    if r == nil and stale == "moved" then return true end
    if r == nil then
        if code == "server" then
            if woken(err) then return true end
            if not server.blpop_whole and whole_seconds_only(err) then
                server.blpop_whole = true
                return _M.wait(server, key, ms, token, final)
            end
            if refused(err) then server.no_notify = true end
        end
        return nil
    end
    -- (the wake-up list's element: woken, to try again)
    if token and type(r) == "table" and r[2] and r[1] ~= wake_key(key) then
        -- (a release that left the key free woke this waiter to compete)
        if r[2] == "w" then return "woken" end
        local fence, since = _M.handed(server, r[2])
        if fence then return "handed", fence, since end
    end
    return true
end

return _M
