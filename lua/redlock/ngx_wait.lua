--- Notified waiting inside nginx. Internal.
--
-- Outside nginx a waiter blocks in BLPOP on a connection of its own
-- (redlock.notify); a worker serving thousands of requests cannot hold a
-- connection per waiting request. Here, each worker keeps one subscriber
-- per server, started by the first waiter: a timer that SUBSCRIBEs to the
-- channel the release script publishes the lock key on when it wakes
-- waiters (csrc/scripts.h, RELEASE), and wakes that worker's waiters of the
-- key through an ngx.semaphore. A release thus wakes a waiter within a
-- round trip instead of a poll interval, and a waiting request holds no
-- connection.
--
-- The subscriber wakes one waiter of the key per message and worker; the
-- waiter tries again, and a newcomer may beat it (no hand-off: a waiter here
-- blocks on no connection of its own, so it joins the waiters queue as one
-- that is only woken; see redlock.notify). Until the
-- subscriber has subscribed, and whenever it has lost its connection, wait
-- answers nil and the caller polls (retry_delay plus jitter): never worse
-- than polling. A release seen after the waiter's last attempt, but before
-- it came to wait, makes wait answer at once. The subscriber stops after
-- IDLE_MS without waiters, when its worker exits, and on a connection it
-- lost it reconnects while there are waiters.
local core = require "redlock.core"
local pubsub = require "redlock.ngx_pubsub"

local ngx = rawget(_G, "ngx")
local now = core.now
local next, pairs = next, pairs

local _M = {}

--- The channel (csrc/scripts.h's RELEASE publishes on it).
_M.CHANNEL = "redlock:wake"
--- A subscriber without waiters for this long stops (ms).
_M.IDLE_MS = 30000
--- After a failed connect, the subscriber tries again after this (ms).
local RECONNECT_MS = 200
--- How long a release is remembered for waiters that come to wait late.
local REMEMBER_MS = 1000

-- Phases in which ngx.semaphore's wait may yield.
local CAN_WAIT = {
    rewrite = true, access = true, content = true, timer = true,
    ssl_cert = true, ssl_session_fetch = true, ssl_client_hello = true,
}

-- This worker's subscribers, by server (its pool name: address, database,
-- credentials; a Cluster's seed list in place of the address). Each:
-- server, running, stopping, ready, ready_at, waiting (key -> { sema, n }),
-- woken and woken_old (key -> ms of the last release seen), swapped_at,
-- idle_since.
local subscribers = {}

local function wake_all(sub)
    for _, w in pairs(sub.waiting) do w.sema:post(w.n) end
end

local function remember(sub, key)
    local t = now()
    if t - sub.swapped_at > REMEMBER_MS then
        sub.woken_old, sub.woken, sub.swapped_at = sub.woken, {}, t
    end
    sub.woken[key] = t
    local w = sub.waiting[key]
    if w then w.sema:post(1) end
end

-- Every tick (redlock.ngx_pubsub): whether the subscriber stops (worker
-- exiting, nobody waiting for IDLE_MS) or moves. A Sentinel-managed
-- server's subscriber follows its master: when the sentinels name another
-- one (announced: see on_switch; or found by the periodic check), it
-- subscribes there (releases publish on the master the locks are taken on).
local function tick(sub)
    local server = sub.server
    if ngx.worker.exiting() or (sub.idle_since and now() - sub.idle_since > _M.IDLE_MS) then
        sub.stopping = true
    end
    if server.sentinel then
        local host, port = require("redlock.ngx_sentinel").address(server)
        if host and (host ~= sub.host or port ~= sub.port) then sub.moved = true end
    end
    return sub.stopping or sub.moved
end

local function run(premature, sub)
    local open = require("redlock.cosocket").open
    -- the reader gives up on a server silent for three ticks
    local read_ms = 3 * pubsub.TICK_MS + sub.server.timeout
    local h = {
        message = function(_, key) remember(sub, key) end,
        tick = function() return tick(sub) end,
        wake = sub.wake,
    }
    while not premature do
        local sock, rd, host, port = open(sub.server, read_ms)
        sub.host, sub.port, sub.moved = host, port, false
        if sock then
            if pubsub.subscribe(sock, rd, _M.CHANNEL) then
                sub.ready, sub.ready_at = true, now()
                pubsub.pump(h, sock, rd)
                sub.ready = false
            end
            sock:close()
            -- a release may have come while nobody listened: look again
            wake_all(sub)
        end
        if sub.stopping or ngx.worker.exiting() or next(sub.waiting) == nil then break end
        if not sub.moved then ngx.sleep(RECONNECT_MS / 1000) end -- (moved: to the new master at once)
    end
    sub.running, sub.ready, sub.stopping = false, false, false
    wake_all(sub)
end

local function subscriber(server)
    local id = server.wait_id or server.pool or server.name
    local sub = subscribers[id]
    if not sub then
        sub = { server = server, running = false, stopping = false, ready = false, ready_at = 0, waiting = {},
            woken = {}, woken_old = {}, swapped_at = 0, idle_since = nil,
            -- posted when the sentinels announce a failover: the tick comes at once
            wake = server.sentinel and require("ngx.semaphore").new() or nil }
        subscribers[id] = sub
    end
    return sub
end

--- The sentinels announced that the master of a Sentinel-managed server
-- moved (redlock.ngx_sentinel; st: its state, server.sentinel): the
-- subscribers of that master subscribe to the new one now, and their
-- waiters try again at once, there.
function _M.on_switch(st)
    for _, sub in pairs(subscribers) do
        if sub.server.sentinel == st and sub.running then
            sub.moved = true
            if sub.wake then sub.wake:post(1) end
        end
    end
end

--- Waits until a release of key is published or ms pass: true; nil when
-- it cannot wait that way yet (the caller polls). since: when the failed
-- attempt was sent (core.now()); a release after it answers at once.
function _M.wait(server, key, ms, since)
    if not CAN_WAIT[ngx.get_phase()] then return nil end
    local sub = subscriber(server)
    if not sub.running then
        local ok = ngx.timer.at(0, run, sub)
        if ok then sub.running, sub.idle_since = true, now() end
        return nil
    end
    -- a release between the attempt and the subscription is not seen
    if not sub.ready or not since or since < sub.ready_at then return nil end
    local seen = sub.woken[key] or sub.woken_old[key]
    if seen and seen >= since then return true end
    local w = sub.waiting[key]
    if not w then
        w = { sema = require("ngx.semaphore").new(), n = 0 }
        sub.waiting[key] = w
    end
    w.n = w.n + 1
    sub.idle_since = nil
    w.sema:wait(ms / 1000)
    w.n = w.n - 1
    if w.n == 0 then
        sub.waiting[key] = nil
        if next(sub.waiting) == nil then sub.idle_since = now() end
    end
    return true
end

return _M
