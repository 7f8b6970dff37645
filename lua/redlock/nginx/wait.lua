--- Notified waiting inside nginx. Internal.
--
-- Outside nginx a waiter blocks in BLPOP on a connection of its own
-- (redlock.notify); a worker serving thousands of requests cannot hold a
-- connection per waiting request. Here, each worker keeps one subscriber
-- per server, started by the first waiter: a timer that SUBSCRIBEs to the
-- channel the release script publishes on (scripts/release.lua).
--
-- The hand-off: a waiter of a single lock, a writer, a reader or a
-- semaphore's permit joins the key's waiters queue as one that is handed
-- the lock or permit by a message ("p", once its worker's subscriber
-- listens: redlock.nginx.cosocket's handoff_how), the same queue as the waiters
-- outside nginx. The release that finds it at the front (or, for permits
-- and readers, among those it lets in) gives it the lock in its atomic
-- step and publishes "<token> fence server-ms";
-- the subscriber hands that to exactly the waiter of that token (an
-- ngx.semaphore of its own), which then holds the lock with no further
-- request. A message that comes before its waiter waits (the refusal's
-- answer still on its way) is kept REMEMBER_MS for it.
--
-- A waiter whose request ended while it waited (the client went away with
-- lua_check_client_abort, ngx.exit from another thread, a killed light
-- thread): nginx takes it off its semaphore, which the subscriber sees
-- (sema:count() is no longer negative while the waiter's entry says it
-- waits). At its next tick, or at once when a hand-off for it comes, the
-- subscriber makes it leave the queue (GIVE_UP) and passes a lock handed
-- to it on (released with its kind's release, so that the next waiter
-- gets it), from a timer.
--
-- A waiter whose request ended between two waits (during one of its own
-- requests to Redis, or a sleep; a killed light thread too): its entry is
-- active from the attempt that joined it to the queue (join) until its
-- acquire ends (done), and holds weakly a
-- table that only the waiter's acquire holds (redlock.lua's retry). When
-- the request ends, nginx drops the waiter's thread, or resets it for
-- another request, and with it that table: once the collector has run, the
-- subscriber knows the waiter can never resume (never before), makes it
-- leave the queue and passes a lock handed to it on, as above. A hand-off
-- not taken within OWED_MS by such a waiter makes the subscriber run the
-- collector, at most once a tick per worker.
--
-- Waiters that are only woken (a group's, one whose lock waits for
-- replicas, one that joined before its subscriber listened): the release
-- publishes the lock key, and the subscriber wakes one of that worker's
-- waiters of the key, which tries again (a newcomer may beat it).
-- Until the subscriber has subscribed, and whenever it has lost its
-- connection, wait answers nil and the caller polls (retry_delay plus
-- jitter): never worse than polling. A wake-up seen after the waiter's last
-- attempt, but before it came to wait, makes wait answer at once. The
-- subscriber stops after IDLE_MS without waiters, when its worker exits,
-- and on a connection it lost it reconnects while there are waiters (each
-- waiter then tries again: a hand-off sent meanwhile is its attempt's).
local core = require "redlock.core"
local pubsub = require "redlock.nginx.pubsub"
local notify = require "redlock.notify"
local scripted = require "redlock.scripted"
local open = require("redlock.nginx.conn").open

local ngx = rawget(_G, "ngx")
local now = core.now
local next, pairs, match, huge, type, setmetatable = next, pairs, string.match, math.huge, type, setmetatable
local collectgarbage = collectgarbage
local WEAK_V = { __mode = "v" }
local handed, refused_at_of = notify.handed, notify.refused_at

local _M = {}

--- The channel (scripts/release.lua publishes on it).
_M.CHANNEL = "redlock:wake"
--- A subscriber without waiters for this long stops (ms).
_M.IDLE_MS = 30000
--- After a failed connect, the subscriber tries again after this (ms).
local RECONNECT_MS = 200
--- How long a release is remembered for waiters that come to wait late.
local REMEMBER_MS = 1000
--- How long a waiter whose GIVE_UP found its lock handed waits for the
-- hand-off's message, which was sent before GIVE_UP's answer (ms).
local LATE_MS = 100
--- A hand-off not taken this long (ms) by a waiter between two waits
-- makes the subscriber ask the collector whether its request has ended.
local OWED_MS = 100
-- When this worker last ran the collector for that (ms).
local collected_at = 0

-- Phases in which ngx.semaphore's wait may yield (redlock.nginx.cosocket's
-- cosocket phases that have it).
local CAN_WAIT = {
    rewrite = true, access = true, content = true, timer = true, ssl_cert = true,
}

--- Whether this phase can wait for a release here (a waiter elsewhere polls).
function _M.can_wait() return CAN_WAIT[ngx.get_phase()] == true end

-- This worker's subscribers, by server (server.wait_id, made with the
-- server: address, database, credentials; a Cluster's seed list in place
-- of the address). Each:
-- server, running, stopping, ready, ready_at, waiting (key -> { sema, n }),
-- woken and woken_old (key -> ms of the last release seen), swapped_at,
-- idle_since.
local subscribers = {}

-- A waiter's entry (sub.tokens) that waits on its semaphore, not yet
-- woken: blocked(e). One whose request ended while it waited: gone(e), the
-- entry says it waits but nobody waits on the semaphore (nginx took the
-- waiter off). (A woken one, e.posted, resumes within the event loop's
-- turn; one still not resumed a tick later is gone too.)
-- One between two waits (e.active, not e.blocked) whose request has
-- ended: ended(e), the table its acquire held collected (see join).
local function blocked(e) return e.blocked and not e.posted and e.sema:count() < 0 end
local function ended(e)
    local held = e.held
    return held ~= nil and held[1] == nil
end
local function gone(e, t)
    if not e.blocked then return e.active and ended(e) end
    if e.posted then return t - e.posted > pubsub.TICK_MS end
    return e.sema:count() >= 0
end

local function post(e, t)
    e.posted = t
    e.sema:post(1)
end

local function wake_all(sub)
    for _, w in pairs(sub.waiting) do w.sema:post(w.n) end
    local t = now()
    for _, e in pairs(sub.tokens) do
        if blocked(e) then post(e, t) end
    end
end

-- A waiter gone while it waited (its entry e) leaves the queue; a lock
-- or permit handed to it is released (e.give_back, its kind's release, or
-- the single lock's), which hands it to the next waiter (GIVE_UP,
-- RELEASE, SEM_RELEASE), from a timer (the subscriber's thread reads its
-- connection), through the waiter's own server (the subscriber's, that of
-- the worker's first waiter, may belong to another client), even if the
-- request's cleanup closed its client (Server:owing).
-- A waiter taken for gone may still resume (woken, then the worker stalled
-- past a tick before it ran): see reclaim. e.giving_back is "pending" while
-- the timer has not started (the waiter may call it off: "reclaimed"),
-- "giving" while it runs (the waiter waits for its end, as its next attempt
-- would otherwise find its own token and take the lock that the give-back
-- then releases), then "given".
local function give_back_of(server, key, token, give_back)
    if scripted.give_up(server, key, token, nil, true) then
        (give_back or scripted.release)(server, key, token)
    end
end

-- A hand-off to a token given back is void from then on (sub.voided, for
-- REMEMBER_MS or two): its message may still come after the give-back
-- (another connection's), and a waiter that resumed late and tries again
-- with that token must not take a lock passed on meanwhile. A waiter whose
-- lock is really handed later finds it by its next attempt (ACQUIRE finds
-- its own token).
local function abandon(sub, e, token)
    local server, key, give_back = e.server:owing(), e.key, e.give_back
    sub.handed[token], sub.handed_old[token], sub.voided[token] = nil, nil, true
    e.giving_back = "pending"
    local started, terr = ngx.timer.at(0, function()
        if e.giving_back ~= "pending" then return end
        e.giving_back = "giving"
        local ok, err = pcall(give_back_of, server, key, token, give_back)
        e.giving_back = "given"
        if e.given then e.given:post(1) end
        if not ok then ngx.log(ngx.ERR, "redlock: giving back a lock of a request that ended: ", err) end
    end)
    if not started then
        -- (worker exiting, or too many timers: the lock waits for its ttl)
        e.giving_back, sub.voided[token] = nil, nil
        ngx.log(ngx.ERR, "redlock: giving back a lock of a request that ended: ", terr)
    end
end

-- A waiter that resumed after abandon took it for gone: true when the
-- hand-off is its own again (the give-back called off), false when the
-- give-back ran (the lock went on; this waiter tries again). One under
-- way is waited for: its round trips are bounded by the server's timeouts,
-- and it ends "given" even when it raises (abandon's pcall).
local function reclaim(sub, e, token)
    if e.giving_back == "pending" then
        e.giving_back = "reclaimed"
        sub.voided[token], sub.voided_old[token] = nil, nil
        return true
    end
    while e.giving_back == "giving" do
        e.given = e.given or require("ngx.semaphore").new()
        e.given:wait(1)
    end
    return false
end

local function rotate(sub, t)
    if t - sub.swapped_at > REMEMBER_MS then
        sub.woken_old, sub.woken = sub.woken, {}
        sub.handed_old, sub.handed = sub.handed, {}
        sub.voided_old, sub.voided = sub.voided, {}
        sub.swapped_at = t
    end
end

-- A message on the channel: a hand-off ("<token> fence server-ms") or a
-- lock key whose waiters are woken. (A key that reads like a hand-off is
-- taken for both: a wake-up is only a hint to try again.)
local function on_message(sub, payload)
    local t = now()
    rotate(sub, t)
    local token, element = match(payload, "^(%x+) (%d+ %d+)$")
    -- (a token given back: its hand-offs are void, see abandon)
    if token and (sub.voided[token] or sub.voided_old[token]) then token = nil end
    if token then
        local e = sub.tokens[token]
        if e and e.blocked then
            if e.posted then -- (woken, not yet resumed: it finds the hand-off)
                e.element = element
                return
            end
            if blocked(e) then
                e.element = element
                return post(e, t)
            end
            sub.tokens[token] = nil
            return abandon(sub, e, token)
        end
        if e and e.active and ended(e) then
            sub.tokens[token] = nil
            return abandon(sub, e, token)
        end
        -- its waiter has not come to wait yet (or is between two waits: its
        -- request may have ended, see sweep)
        if e and e.active and not e.owed then e.owed = t end
        sub.handed[token] = element
    end
    sub.woken[payload] = t
    local w = sub.waiting[payload]
    if w and w.n > 0 then return w.sema:post(1) end
    -- no waiter of the key that is only woken here: one that may be handed
    -- the lock tries again (a release without a hand-off, e.g. before
    -- Redis 3.2, deleted the key)
    for _, e in pairs(sub.tokens) do
        if e.key == payload and blocked(e) then return post(e, t) end
    end
end

local function idle(sub)
    return next(sub.waiting) == nil and next(sub.tokens) == nil
end

-- Whether a hand-off waits for a waiter between two waits, whose
-- request may have ended (see join): then the collector is asked.
local function owed(sub, t)
    for _, e in pairs(sub.tokens) do
        if e.owed and e.active and not e.blocked and t - e.owed > OWED_MS and not ended(e) then
            return true
        end
    end
    return false
end

-- Entries of waiters gone: ended while they waited or between two waits
-- (abandoned), or not waiting since the last tick and not in an acquire
-- (dropped: a next wait makes a new one).
local function sweep(sub)
    local t = now()
    if t - collected_at > pubsub.TICK_MS and owed(sub, t) then
        collectgarbage()
        collected_at = now()
    end
    for token, e in pairs(sub.tokens) do
        if gone(e, t) then
            sub.tokens[token] = nil
            abandon(sub, e, token)
        elseif not e.blocked and not e.active and t - e.touched > pubsub.TICK_MS then
            sub.tokens[token] = nil
        end
    end
    if sub.idle_since == nil and idle(sub) then sub.idle_since = t end
end

-- Every tick (redlock.nginx.pubsub): whether the subscriber stops (worker
-- exiting, nobody waiting for IDLE_MS) or moves. The subscriber of a
-- server whose kind's address moves (a Sentinel's master: the kind's moved
-- and on_switch, redlock.nginx.sentinel) follows it: when another one is
-- named (announced: see on_switch; or found by the periodic check), it
-- subscribes there (releases publish on the master the locks are taken on).
local function tick(sub)
    local server = sub.server
    sweep(sub)
    if ngx.worker.exiting() or (sub.idle_since and now() - sub.idle_since > _M.IDLE_MS) then
        sub.stopping = true
    end
    local moved = server.kind.moved
    if moved and moved(server, sub.host, sub.port) then sub.moved = true end
    return sub.stopping or sub.moved
end

local function run(premature, sub)
    -- the reader gives up on a server silent for three ticks
    local read_ms = 3 * pubsub.TICK_MS + sub.server.timeout
    local h = {
        message = function(_, payload) on_message(sub, payload) end,
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
        if sub.stopping or ngx.worker.exiting() or idle(sub) then break end
        if not sub.moved then ngx.sleep(RECONNECT_MS / 1000) end -- (moved: to the new master at once)
    end
    sub.running, sub.ready, sub.stopping = false, false, false
    wake_all(sub)
end

local function id_of(server) return server.wait_id end

-- The kinds whose switches this module listens to (their on_switch).
local listening_to = {}

local function subscriber(server)
    local id = id_of(server)
    local sub = subscribers[id]
    if not sub then
        local on_switch = server.kind.on_switch
        if on_switch and not listening_to[on_switch] then
            listening_to[on_switch] = true
            on_switch(_M.on_switch)
        end
        sub = { server = server, running = false, stopping = false, ready = false, ready_at = 0, waiting = {},
            woken = {}, woken_old = {}, swapped_at = 0, idle_since = nil,
            -- the waiters that may be handed the lock, by token: key, sema,
            -- blocked (waits on sema now), element (the hand-off), touched,
            -- server and give_back (its own, and its kind's release: see
            -- abandon), active, held and owed (see join);
            -- and hand-offs that came before their waiter waited
            tokens = {}, handed = {}, handed_old = {}, voided = {}, voided_old = {},
            -- posted when a switch is announced: the tick comes at once
            wake = on_switch and require("ngx.semaphore").new() or nil }
        subscribers[id] = sub
    end
    return sub
end

--- A switch was announced (a kind's on_switch: the sentinels named a new
-- master; mine(server): whether server's moved): the subscribers of those
-- servers subscribe to the new one now, and their waiters try again at
-- once, there.
function _M.on_switch(mine)
    for _, sub in pairs(subscribers) do
        if sub.running and mine(sub.server) then
            sub.moved = true
            if sub.wake then sub.wake:post(1) end
        end
    end
end

--- Whether this worker's subscriber for server listens: its waiters may
-- be handed the lock ("p", redlock.nginx.cosocket's handoff_how).
function _M.listening(server)
    local sub = subscribers[id_of(server)]
    return sub ~= nil and sub.ready
end

-- The entry of a waiter (token) of key, made on first use.
local function entry(sub, key, token)
    local e = sub.tokens[token]
    if not e then
        e = { key = key, sema = require("ngx.semaphore").new(), blocked = false, posted = false,
            element = nil, touched = 0, active = false, held = nil, owed = nil }
        sub.tokens[token] = e
        sub.idle_since = nil
    end
    return e
end

-- A waiter that may be handed the lock (token): "handed", fence, since
-- when a release handed it, else true (woken, or ms passed).
local function wait_handed(server, sub, key, ms, since, token, give_back)
    local refused_at = refused_at_of(server) -- (this request's: nothing yielded since)
    local void = sub.voided[token] or sub.voided_old[token]
    local element = not void and (sub.handed[token] or sub.handed_old[token])
    if element then
        sub.handed[token], sub.handed_old[token] = nil, nil
        -- (nil: a hand-off older than this waiter's last refusal, void)
        local fence, at = handed(server, element, refused_at)
        if fence then
            sub.tokens[token] = nil
            return "handed", fence, at
        end
    end
    local seen = sub.woken[key] or sub.woken_old[key]
    if seen and seen >= since then return true end
    local e = entry(sub, key, token)
    sub.idle_since = nil
    e.blocked, e.posted, e.server, e.give_back, e.owed = true, false, server, give_back, nil
    e.sema:wait(ms / 1000)
    e.blocked, e.touched = false, now()
    element = e.element
    -- (taken for gone as it resumed late: its hand-off only if called back)
    if e.giving_back and not reclaim(sub, e, token) then return true end
    if element then
        sub.tokens[token] = nil
        local fence, at = handed(server, element, refused_at)
        if fence then return "handed", fence, at end
    end
    return true
end

--- A waiter (token) of key joins its queue as one that is handed the lock
-- by a message ("p": redlock.nginx.cosocket's handoff_how, for the attempt that
-- is about to be sent): from now until done, a waiter whose request ends
-- between two waits is seen (see sweep), and what it is handed is given
-- back with give_back (as wait's). alive: a table that its acquire holds
-- until it ends, and nothing else (redlock.lua's retry); anything else
-- (true) is never taken for ended.
function _M.join(server, key, token, give_back, alive)
    local sub = subscribers[id_of(server)]
    if not sub then return end
    local e = entry(sub, key, token)
    e.active, e.server, e.give_back = true, server, give_back
    if type(alive) == "table" and not e.held then e.held = setmetatable({ alive }, WEAK_V) end
end

--- The acquire of token's waiter has ended, whatever it came to (the lock
-- taken, or not; redlock.lua): its entry goes.
function _M.done(server, token)
    local sub = subscribers[id_of(server)]
    local e = sub and sub.tokens[token]
    if e and not e.blocked then sub.tokens[token] = nil end
end

--- A waiter (token) whose GIVE_UP found key's lock or permit held by its
-- token (redlock.scripted.give_up): a release handed it that as its last
-- wait ended, and published the message before GIVE_UP answered (it may
-- still be on its way, waited for at most LATE_MS): "handed", fence,
-- since as wait's; nil when none comes (the caller releases it).
-- give_back: as wait's.
function _M.handed_late(server, key, token, give_back)
    if not CAN_WAIT[ngx.get_phase()] then return nil end
    local sub = subscribers[id_of(server)]
    if not sub or not sub.ready then return nil end
    -- (since: no wake-up counts, only this waiter's hand-off)
    local handed_it, fence, since = wait_handed(server, sub, key, LATE_MS, huge, token, give_back)
    if handed_it == "handed" then return handed_it, fence, since end
end

--- Waits until a release of key is published or ms pass: true; nil when
-- it cannot wait that way yet (the caller polls). since: when the failed
-- attempt was sent (core.now()); a release after it answers at once.
-- token: the waiter's, when it joined the queue as one that is handed the
-- lock or a permit ("p"): then "handed", fence, since (see
-- redlock.notify.handed) when a release did. give_back(server, key,
-- token): how a kind's lock is released (a permit's, a reader's; nil: a
-- single lock's), for a hand-off to a waiter whose request ended.
function _M.wait(server, key, ms, since, token, give_back)
    if not CAN_WAIT[ngx.get_phase()] then return nil end
    local sub = subscriber(server)
    if not sub.running then
        local ok = ngx.timer.at(0, run, sub)
        if ok then sub.running, sub.idle_since = true, now() end
        return nil
    end
    -- a release between the attempt and the subscription is not seen
    if not sub.ready or not since or since < sub.ready_at then return nil end
    if token then return wait_handed(server, sub, key, ms, since, token, give_back) end
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
        if idle(sub) then sub.idle_since = now() end
    end
    return true
end

return _M
