--- redlock: Redis distributed locks for Lua.
--
--    local redlock = require "redlock"
--    local client = redlock.new{ servers = { "redis://127.0.0.1:6379" } }
--    local ok, err = client:with_lock("job:nightly", function(lock)
--        -- only one holder at a time runs this
--    end)
--
-- Misuse (wrong types, bad options) raises. Run-time outcomes return
-- `nil, message, code`, code one of: locked, timeout, not owner, no quorum,
-- replicas (fewer replicas than opts.replicas acknowledged the lock's
-- write), misuse (the key is held as another kind of lock: a semaphore of
-- another limit, a semaphore's key taken as a single lock), connection,
-- server, closed; the message starts with the code word.
-- @module redlock
local core = require "redlock.core"
local cosocket = require "redlock.cosocket"
local options = require "redlock.options"
local hold = require "redlock.hold"
local server_mod = require "redlock.server"
local single = require "redlock.single"
local quorum = require "redlock.quorum"
local scripted = require "redlock.scripted"
local util = require "redlock.util"
local replicas = require "redlock.replicas"
local ops_for = require("redlock.detect").ops_for
local events = require "redlock.events"
local eviction = require "redlock.eviction"
local semaphore = require "redlock.semaphore"
local group = require "redlock.group"
local shared = require "redlock.shared"

local now, new_token = core.now, core.token
local show_key, jitter = util.show_key, util.jitter
local ms_string, fence_counter = util.ms_string, util.fence_counter
local grant = scripted.grant
local setmetatable, type, error, pcall, ipairs, pairs = setmetatable, type, error, pcall, ipairs, pairs
local format, floor, ceil, find = string.format, math.floor, math.ceil, string.find
local max, min = math.max, math.min
local RECHECK_MS = require("redlock.notify").RECHECK_MS
local dispatch = hold.dispatch
local emit, count_acquire = events.emit, events.count_acquire

local _M = {
    --- Version of this module, "MAJOR.MINOR.PATCH".
    VERSION = "0.1.0",
    --- The Redis nil, a NULL light userdata (the same value as ngx.null).
    null = core.null,
}

--- A fresh lock token: 32 lowercase hex chars of 128 bits from the OS.
-- @treturn string
function _M.token() return new_token() end

local Client = {}
Client.__index = Client
local Lock = {}
Lock.__index = Lock
-- A lock's fields that most locks keep at these values (see taken):
-- whether this client released it; its re-entrant holds; why it is known
-- lost (redlock.hold), else false; its renewal (redlock.hold), else false;
-- how many replicas acknowledged the write that gave its validity (0 when
-- none was waited for).
Lock.released, Lock.holds, Lock.lost_reason = false, 1, false
Lock.renewal, Lock.renewal_id, Lock.replicas = false, false, 0

local CLOSED_MSG = "closed: the client is closed"

local function closed() return nil, CLOSED_MSG, "closed" end

-- Raises for a key that is not a non-empty string. Callers test first
-- (`type(key) ~= "string" or key == ""`) and call this only then: a call on
-- every lock costs more than the test.
local function bad_key(fname, key)
    if type(key) ~= "string" then
        error(format("bad argument #1 to '%s' (string expected, got %s)", fname, type(key)), 3)
    end
    error(format("bad argument #1 to '%s' (non-empty string expected)", fname), 3)
end

-- The validity a lock has left after `ttl` counted from t0 (taken before the
-- request was sent): ttl less the drift allowance, as in Redlock.
local function expiry(client, t0, ttl)
    return t0 + ttl - (ttl * client.drift_factor + 2)
end

-- What the hot path reads of an options table, made when the table is:
-- rep (the options themselves when a lock waits for replicas, else
-- false), ttl_s (the ttl as Redis reads it) and valid_ms (the validity a
-- lock taken with it has, see expiry).
local function derive(o)
    o.rep = replicas.asked(o) and o
    local ttl = o.ttl
    o.ttl_s, o.valid_ms = ms_string(ttl), ttl - (ttl * o.drift_factor + 2)
    return o
end

--- Makes a client. Raises on bad options; connects lazily.
-- @tparam[opt] table opts servers, ttl, wait, retry_delay, retry_jitter,
--   drift_factor, mode, connect_timeout, timeout, tls, replicas,
--   replica_timeout, aof (see docs/api.md)
-- @treturn Client
function _M.new(opts)
    if opts ~= nil and type(opts) ~= "table" then
        error(format("bad argument #1 to 'new' (table expected, got %s)", type(opts)), 2)
    end
    opts = opts or {}
    local o = derive(options.check("new", opts, options.DEFAULTS, options.CALL, options.CLIENT))
    local specs = options.servers(opts.servers, o.tls)
    -- Inside nginx: cosockets where the phase allows, else hiredis
    -- (redlock.cosocket decides per call); elsewhere hiredis' sockets.
    local transport = cosocket.in_nginx() and cosocket or server_mod
    local servers = {}
    for i, spec in ipairs(specs) do
        if spec.cluster and o.mode == "legacy" then
            error(format("bad option 'mode' to 'new' (server #%d is a Cluster, which always runs"
                .. " the scripts: \"legacy\" does not apply)", i), 2)
        end
        spec.connect_timeout = spec.connect_timeout or o.connect_timeout
        spec.timeout = spec.timeout or o.timeout
        servers[i] = transport.new(spec, o.mode, o)
        servers[i].plain = o.legacy_value == "plain" -- (redlock.legacy)
    end
    o.servers = nil
    if #servers >= 2 then quorum.check_servers(servers) end
    -- a Cluster keeps fence counters per slot (its scripts touch one slot);
    -- a Redlock with a Cluster member does on every member, as the fan-out
    -- sends every server the same keys
    local slot_fences = false
    for _, server in ipairs(servers) do slot_fences = slot_fences or server.slot_fences end
    for _, server in ipairs(servers) do server.slot_fences = slot_fences end
    local names = {}
    for i, server in ipairs(servers) do names[i] = server.name end
    return setmetatable({
        opts = o,
        servers = servers,
        drift_factor = o.drift_factor,
        slot_fences = slot_fences,
        strategy = #servers >= 2 and quorum or single,
        -- the server of a single-instance client (see first_attempt)
        one = #servers == 1 and servers[1] or false,
        -- the servers' module: its sleep() waits between attempts
        transport = transport,
        closed = false,
        -- the servers' names, as events show them (never a password)
        names = names,
        -- the counters of stats() (redlock.events), always on
        st = events.new_stats(),
        renewals_base = 0,
        -- (redlock.hold: the renewal thread, made at the first renewal, and
        -- whether a renewed lock has a hook; present, as the hot paths read
        -- them on every call)
        renewer = false,
        polls = false,
        -- (redlock.hold: re-entrant holds, made at the first)
        holds = false,
    }, Client)
end

local function call_opts(client, fname, opts)
    if opts == nil then return client.opts end
    return derive(options.check(fname, opts, client.opts, options.CALL))
end

-- Why this client cannot take the kind o asks for on key (a permit, a read
-- lock, a group lock) keeping its guarantees, or nil.
local function kind_refusal(client, key, o)
    if o.limit and o.shared then return "cannot be shared too: readers have no limit" end
    if (o.limit or o.shared) and type(key) == "table" then return "of several keys: it takes one key" end
    if #client.servers >= 2 then
        if o.limit == 1 then
            return "over independent masters (Redlock) is refused: limit = 1 is a single lock, take it"
                .. " without limit"
        end
        if o.limit then
            return "over independent masters (Redlock) is refused: N permits on each server do not"
                .. " bound the holders to N, as two majorities may overlap on different servers"
        end
        if type(key) == "table" and client.slot_fences then
            return "over a Redlock with a Cluster member is not supported: one script takes the keys on each"
                .. " server, and a Cluster's script touches one hash slot"
        end
    end
    -- (mode "legacy" asked for; a server mode "auto" put in legacy mode is
    -- a run-time outcome: the kind's script is sent and its refusal said,
    -- see redlock.semaphore.needs_scripts)
    for _, server in ipairs(client.servers) do
        if server.mode == "legacy" then
            return "needs the server's scripts: legacy mode cannot take it in one atomic step"
        end
    end
    if o.reentrant then return "cannot be reentrant" end
end

-- The options of a call that takes a permit (opts.limit), a read lock
-- (opts.shared) or a group lock (a list of keys): o with o.kind, the
-- strategy that takes, releases and extends it (redlock.semaphore,
-- redlock.shared, redlock.group); the client's own options are copied once
-- (per kind) and kept. Raises where this client cannot keep that kind's
-- guarantees.
local function kind_opts(client, fname, key, o)
    local why = kind_refusal(client, key, o)
    if why then
        error(format("bad argument to '%s' (%s %s)", fname, o.limit and "a semaphore (limit)"
            or o.shared and "a read lock (shared)" or "a group lock (a list of keys)", why), 3)
    end
    local kind = o.limit and semaphore.strategy(o.limit)
        or o.shared and (#client.servers >= 2 and shared.quorum or shared.strategy)
        or #client.servers >= 2 and group.quorum or group.strategy
    if o ~= client.opts then -- a fresh table (call_opts): ours to complete
        o.kind = kind
        return o
    end
    local kinds = client.kind_opts
    if not kinds then
        kinds = {}
        client.kind_opts = kinds
    end
    local copy = kinds[kind]
    if copy then return copy end
    copy = {}
    for k, v in pairs(o) do copy[k] = v end
    copy.rep = replicas.asked(copy) and copy
    copy.kind = kind
    kinds[kind] = copy
    return copy
end

-- A key refused at a first attempt less than this long ago (ms) is likely
-- held still: its next first attempt asks the acquire script at once (one
-- round trip, which says the holder's pttl), not conn:grant, whose refusal
-- does not say it and would cost a second round trip.
local REFUSED_MS = 1000

-- The first attempt: on one server in script mode, without a script where
-- the connection can (redlock.scripted.grant: SET NX PX and the fence's
-- XADD in one round trip), else the acquire script, sent from here; else
-- the strategy's. It is the whole way of an uncontended lock, and each
-- layer in it costs more than its instructions (the code runs cold after
-- every reply): going through redlock.single and redlock.scripted cost the
-- cycle 2-3% of the floor's speed. What the answer means is still theirs.
-- o: the call's options (o.fence = false: no counter touched, no fence
-- answered; o.rep: the lock waits for replicas, the strategy's way). t0:
-- before the first request. A lock taken by conn:grant comes with a 4th
-- value, now() after the answer (the end of the acquire, for stats()); a
-- lock the acquire script took after grant had sent its own request, with
-- a 6th: the time before the script's request (the lock's validity counts
-- from it: the script set or refreshed the key's ttl after it).
local function first_attempt(client, key, token, o, t0)
    local server, unfenced = client.one, not o.fence
    if not server or server.ops ~= scripted or o.rep then
        return client.strategy.acquire(client, key, token, o.ttl, nil, nil, unfenced, o.rep, o.on_event)
    end
    local set, since
    if server.grants and (server.refused ~= key or server.refused_until < t0) then
        local ok, v, code = grant(server, key, token, o.ttl_s, unfenced, t0 + o.valid_ms)
        if ok == true then
            return true, v, nil, code
        elseif ok == false then
            server.refused, server.refused_until = key, t0 + REFUSED_MS
        elseif ok == nil then
            return single.acquired(server, nil, v, code)
        else
            set, since = v, now()
        end
        -- ("script", or a refusal: the script says the holder's pttl)
    end
    local taken, v, at
    if unfenced then
        taken, v, at = client.strategy.acquire(client, key, token, o.ttl, nil, nil, unfenced, nil, o.on_event)
        if taken == nil and set then scripted.release(server, key, token) end
        return taken, v, at, nil, nil, since
    end
    local fkey = fence_counter(key, server.slot_fences)
    taken, v, at = server.conn:eval_values("acquire", 2, key, fkey, token, o.ttl_s)
    if taken == 0 then
        server.refused, server.refused_until = key, t0 + REFUSED_MS
    elseif taken == 1 and server.refused == key then
        server.refused = false
    elseif taken == nil and set then
        -- the key grant set may hold our token: given back (best effort;
        -- else its ttl ends it)
        scripted.release(server, key, token)
    end
    local ok, fence, acked = single.acquired(server, scripted.answer(server, taken, v, at))
    return ok, fence, acked, nil, nil, since
end

-- A lock that replicas acknowledged too late: its validity ran out while
-- WAIT waited. Released; nil, message, "replicas".
local function too_late(client, key, token, o, acked)
    local msg = format("replicas: %d replicas acknowledged %s after its validity ran out"
        .. " (replica_timeout %d ms, ttl %d ms)", acked, show_key(key), o.replica_timeout, o.ttl)
    return nil, replicas.released(msg, (o.kind or client.strategy).release(client, key, token)), "replicas"
end

-- A lock taken at t0 (before the request), with its renewal, re-entrant
-- hold or on_lost when asked for (redlock.hold). acked: how many replicas
-- acknowledged it (o.rep), else nil.
local function taken(client, key, token, fence, o, renew, t0, acked)
    if not (renew or acked or o.reentrant or o.on_lost or o.kind) then
        -- the usual lock: the fields every lock has; released, holds,
        -- lost_reason, renewal, renewal_id and replicas read their defaults
        -- from Lock (a field costs the making of every lock more than a
        -- default costs its reads)
        return setmetatable({
            key = key,
            token = token,
            fence = o.fence and fence or nil,
            client = client,
            ttl = o.ttl,
            expires = t0 + o.valid_ms, -- expiry(), made once per options (derive)
            -- opts.on_event (redlock.events), or nil
            on_event = o.on_event,
        }, Lock)
    end
    -- one that redlock.hold or the replicas' check add to: made with the
    -- fields they set (and a hash part with room for the rest), which then
    -- cost no rehash of the table
    local lock = setmetatable({
        key = key,
        token = token,
        fence = o.fence and fence or nil,
        client = client,
        ttl = o.ttl,
        expires = t0 + o.valid_ms,
        released = false,
        renewal = false,
        renewal_id = false,
        legacy_renewal = false,
        replicas = acked, -- (else Lock's 0)
        on_event = o.on_event,
    }, Lock)
    local kind = o.kind
    if kind then
        -- a permit or a group lock: its own release and extend
        lock.strategy = kind
        if kind.limit then
            lock.limit = kind.limit
        elseif kind.shared then
            lock.shared = true
        else
            lock.keys, lock.fences, lock.fence = key, lock.fence, nil
        end
    end
    if acked then
        if lock.expires <= now() then return too_late(client, key, token, o, acked) end
        lock.rep = o -- its extends wait for replicas too
    end
    return hold.taken(lock, o, renew, t0)
end

-- What an ended acquire counts as (redlock.events), by its code.
local ACQUIRE_KIND = { locked = "refused", timeout = "timeout", ["no quorum"] = "quorum_failed" }

-- Every acquire ends here (started at `start`, after `attempts` requests;
-- t_end: when it ended, if known, else now): counts it in stats() and, with
-- a hook, tells it. Passes the outcome on.
local function ended(client, o, key, start, attempts, lock, err, code, t_end)
    local waited = (t_end or now()) - start
    local kind = lock and "acquired" or ACQUIRE_KIND[code] or "server_error"
    count_acquire(client.st, kind, waited)
    if not lock and kind == "server_error" and client.one then
        client.one.errors = (client.one.errors or 0) + 1
    end
    local hook = o.on_event
    if hook then
        emit(client, hook, { type = kind, key = show_key(key), waited = floor(waited), attempts = attempts,
            fence = lock and lock.fence or nil, err = err, code = code })
    end
    return lock, err, code
end

-- An attempt that failed (not a refusal): its message, naming the key
-- (and, after a wait, how long and how many attempts it lasted).
local function failed(key, err, code, wait, attempts)
    if wait then
        return nil, format("%s (acquiring %s, waited %d ms, %d attempts)", err, show_key(key), floor(wait),
            attempts), code
    end
    return nil, format("%s (acquiring %s)", err, show_key(key)), code
end

-- The lock a release handed to this waiter (redlock.notify), with its
-- fence: it counts from the server ms `since` after the waiter's last
-- refused attempt, sent at t_refused, on this client's clock (never later
-- than now).
local function handed(client, key, token, o, renew, t_refused, fence, since)
    local at, t = t_refused + since * (1 - client.drift_factor), now()
    if at > t then at = t end
    return taken(client, key, token, fence, o, renew, at)
end

-- A waiter that leaves the waiters queue (strategy.give_up): a lock handed
-- to it meanwhile is its own (returned); one whose hand-off it cannot know
-- (fence unknown) is released, which hands it to the next waiter.
local function leave(client, key, token, o, renew, t_refused)
    local strategy = o.kind or client.strategy
    local outcome, fence, since = strategy.give_up(client, key, token)
    -- (fence 0 where one was asked for: an older client's release, which
    -- knew no fence for this waiter, handed it; released as unknown)
    if outcome == "handed" and (fence ~= 0 or not o.fence) then
        return handed(client, key, token, o, renew, t_refused, fence, since)
    end
    if outcome == "held" or outcome == "handed" then strategy.release(client, key, token) end
end

-- After a refused first attempt (pttl, where: the holder's), attempts
-- until `wait` ms have passed since start (attempts: how many were made).
-- A Redlock attempt that reached no majority because servers failed
-- (code "no quorum"; quorum.acquire has taken back what it got) is tried
-- again the same way, with no holder's pttl to bound the delay (failure:
-- the message of such a first attempt, pttl -1); at the deadline the last
-- attempt's failure is the answer, naming each server and what it said.
-- why: why the last refusal was not a plain "locked" (Redlock: split
-- votes, too slow), said with the timeout.
-- Between attempts it blocks until the holder's release hands it the lock
-- or wakes it (strategy.wait, opts.notify) or sleeps retry_delay plus
-- jitter; either way never past the holder's expiry (the reply's pttl) nor
-- past the deadline. A woken waiter that a newcomer beats waits again with
-- what is left of its budget.
-- It ends at the deadline, not a round trip or two after it: the last
-- block or sleep ends when only what follows it fits (a round trip is the
-- fastest an attempt took): leaving the queue, for a waiter that a release
-- hands the lock to; one more attempt (and leaving the queue after it) for
-- the others; and no attempt is sent whose answer would come more than
-- half a round trip late. The last block ends on this side of the
-- connection if the server is late (redlock.notify). Leaving the queue
-- learns of a hand-off that came meanwhile, so a release at the last
-- moment still hands over.
local function retry(client, key, o, wait, renew, token, start, pttl, where, attempts, failure, why)
    local hook = o.on_event
    local strategy, ttl, unfenced, rep = o.kind or client.strategy, o.ttl, not o.fence, o.rep
    local wait_for = o.notify and strategy.wait
    -- a notified waiter's refusals put it in the waiters queue, whose
    -- releases hand it the lock or wake it (waiting: ms it may still wait;
    -- redlock.notify); refused by the plain first attempt, it asks again
    -- at once, joining the queue this time, before it blocks
    local notified, waiting = wait_for and wait >= 1, nil
    -- a waiter that blocks on a connection of its own may be handed the
    -- lock or permit (redlock.notify), and so may a waiter inside nginx,
    -- whose worker's subscriber delivers the hand-off (redlock.ngx_wait);
    -- one whose lock must wait for replicas is woken to try again instead
    -- (and so is a group's, whatever it asks: redlock.group)
    local handoff = notified and not rep
    local mine = handoff and token or nil
    local server = client.one
    if notified and server then server.contended = key end -- see acquire
    local deadline = start + wait
    local v = pttl
    local t0 = start -- before each attempt
    -- one round trip: the fastest attempt so far (the first may include
    -- a connect); 0 until one is measured
    local rtt = attempts > 0 and now() - start or 0
    -- before the attempt whose refusal a hand-off's server time counts from
    -- (redlock.notify; an attempt that failed, e.g. TRYAGAIN, is no refusal)
    local t_refused = start
    local waited, relisted = false, false
    while true do
        -- what an attempt costs from here to the end: its round trip, and
        -- leaving the queue after it (a notified waiter is in the queue
        -- after the attempt); and what ending costs: leaving the queue
        local try_cost = notified and 2 * rtt or rtt
        local end_cost = waiting and rtt or 0
        local left = deadline - now()
        local tried = false
        if left > end_cost then
            if not (notified and waiting == nil) then
                -- the last block ends when only what follows it fits: the
                -- leave for a waiter that a release hands the lock to (a
                -- timed-out block means no release came), an attempt and
                -- the leave for the others
                local bound, final = left - (mine and end_cost or try_cost), true
                if v >= 0 and v + 1 < bound then bound, final = v + 1, false end
                if notified and bound > RECHECK_MS then bound, final = RECHECK_MS, false end
                if bound > 0 then
                    local blocked, fence, since
                    -- (the token again last: a group's wait finds the queue it
                    -- joined by it, also when it may not be handed a lock)
                    if wait_for then
                        blocked, fence, since = wait_for(client, key, bound, t0, mine, final, token)
                    end
                    if blocked == "handed" then
                        return ended(client, o, key, start, attempts,
                            handed(client, key, token, o, renew, t_refused, fence, since))
                    end
                    if not blocked then
                        -- a server that has just refused BLPOP: polled from now on,
                        -- so at once in the queue again as a waiter only woken
                        -- (redlock.scripted), not one a release hands the lock to
                        if mine and server and server.no_notify and not relisted then
                            relisted = true
                        else
                            local delay = o.retry_delay + jitter(o.retry_jitter)
                            client.transport.sleep(delay < bound and delay or bound)
                        end
                    end
                    waited = true
                end
            end
            t0 = now()
            -- an attempt whose answer comes by the deadline, or within half
            -- a round trip of it (the last one, after the last block)
            if deadline - t0 > try_cost / 2 then
                tried = true
                -- how long its next block lasts at most (at least 1 ms): its place
                -- in the queue lasts that long (and a second) without a new attempt
                if notified then waiting = ms_string(max(1, min(RECHECK_MS, ceil(deadline - t0)))) end
                local ok, v2, where2, why2 = strategy.acquire(client, key, token, ttl, waiting, handoff,
                    unfenced, rep, hook)
                attempts = attempts + 1
                local took = now() - t0
                if rtt == 0 or took < rtt then rtt = took end
                if ok then
                    if server and not waited then server.contended = false end
                    return ended(client, o, key, start, attempts,
                        taken(client, key, token, v2, o, renew, t0, where2))
                end
                if ok == false then
                    v, where, t_refused, why, failure = v2, where2, t0, why2, nil
                elseif where2 == "no quorum" then
                    -- (servers failed: no holder's pttl to wait for)
                    v, failure = -1, v2
                elseif not (where2 == "server" and find(v2, "TRYAGAIN", 1, true)) then
                    local lock = waiting and leave(client, key, token, o, renew, t_refused)
                    if lock then return ended(client, o, key, start, attempts, lock) end
                    return ended(client, o, key, start, attempts, failed(key, v2, where2))
                end
                -- (TRYAGAIN: a Cluster slot half migrated for longer than the
                -- timeout; nothing ran, and the wait goes on as for a holder)
            end
        end
        if not tried then
            -- a waiter that gives up leaves the waiters queue now, not when
            -- the queue expires (releases would keep choosing it)
            local lock = waiting and leave(client, key, token, o, renew, t_refused)
            if lock then return ended(client, o, key, start, attempts, lock) end
            if failure then
                return ended(client, o, key, start, attempts,
                    failed(key, failure, "no quorum", wait, attempts))
            end
            local err, code = format("timeout: waited %d ms for %s, held by another owner on %s",
                floor(wait), show_key(key), where), "timeout"
            if why then err = err .. " (the last attempt: " .. why .. ")" end
            return ended(client, o, key, start, attempts, nil, err, code)
        end
    end
end

-- One attempt, or attempts until `wait` ms have passed (see retry).
-- renew: whether the lock is renewed in the background (redlock.hold).
local function acquire(client, key, o, wait, renew)
    if o.reentrant then
        local lock, err, code = hold.reenter(client, key, o, renew)
        if lock or err then return lock, err, code end
    end
    local token, start = new_token(), now()
    -- the key waited for last time on this server: it is likely held now,
    -- and the first attempt goes straight to the waiters queue (a
    -- notified waiter's first attempt; see retry), one round trip less
    -- per lock under sustained contention; an acquire that did not wait
    -- ends that
    local server = client.one
    if server and server.contended == key then
        if wait >= 1 and o.notify then
            -- (pttl 0: should that attempt fail, e.g. TRYAGAIN, the next
            -- comes soon, not after the whole wait)
            return retry(client, key, o, wait, renew, token, start, 0, server:where(), 0)
        end
        server.contended = false
    end
    local ok, v, where, why, why_code, since
    if o.kind then -- (a semaphore, readers, a group: redlock.semaphore, shared, group)
        ok, v, where = o.kind.acquire(client, key, token, o.ttl, nil, nil, not o.fence, o.rep)
    else
        ok, v, where, why, why_code, since = first_attempt(client, key, token, o, start)
    end
    -- a server met for the first time: can it evict a held lock? (once;
    -- Redlock's servers: redlock.quorum)
    if server and ok ~= nil and server.policy == nil then
        eviction.check(client, server, o.on_event, show_key(key))
    end
    if ok then
        if why then
            -- (conn:grant's lock, which never waits for replicas; why: when
            -- its answer came, the end of this acquire)
            local lock = taken(client, key, token, v, o, renew, start)
            return ended(client, o, key, start, 1, lock, nil, nil, why)
        end
        return ended(client, o, key, start, 1, taken(client, key, token, v, o, renew, since or start, where))
    end
    if ok == nil then
        -- (Redlock: servers failed, not a holder; tried again within wait)
        if where == "no quorum" and wait > 0 then
            return retry(client, key, o, wait, renew, token, start, -1, nil, 1, v)
        end
        return ended(client, o, key, start, 1, failed(key, v, where))
    end
    if wait > 0 then return retry(client, key, o, wait, renew, token, start, v, where, 1, nil, why) end
    -- a strategy may say why other than "locked" (Redlock: no quorum)
    if why then
        return ended(client, o, key, start, 1, nil, format("%s (acquiring %s)", why, show_key(key)), why_code)
    end
    -- (concatenation: try_acquire on a held key builds this every time)
    local err, code = "locked: " .. show_key(key) .. " is held by another owner on " .. where
        .. (v >= 0 and " (expires in " .. floor(v) .. " ms)" or " (expires in never: no ttl)"), "locked"
    return ended(client, o, key, start, 1, nil, err, code)
end

--- A client, made by `new`: its servers, options and connections.
-- @type Client

--- Takes the lock on `key`, waiting up to `opts.wait` ms.
-- @tparam string key
-- @tparam[opt] table opts ttl, wait, retry_delay, retry_jitter, notify,
--   renew (default false here), max_hold, on_lost, reentrant, owner,
--   replicas, replica_timeout, aof
-- @treturn Lock|nil the lock, or nil, message, code
--   (timeout, locked when wait is 0, replicas, connection, server, closed,
--   no quorum)
function Client:acquire(key, opts)
    if type(key) ~= "string" or key == "" then
        if type(key) ~= "table" then bad_key("acquire", key) end
        key = group.keys("acquire", key)
    end
    local o = opts == nil and self.opts or call_opts(self, "acquire", opts)
    if o.limit or o.shared or type(key) == "table" then o = kind_opts(self, "acquire", key, o) end
    if self.closed then return closed() end
    local renewer = self.renewer
    if renewer and (self.polls or renewer:pending()) then dispatch(self) end
    return acquire(self, key, o, o.wait, o.renew == true)
end

--- Exactly one attempt to take the lock on `key` (opts.wait is ignored).
-- @tparam string key
-- @tparam[opt] table opts ttl
-- @treturn Lock|nil the lock, or nil, message, code (locked, connection, ...)
function Client:try_acquire(key, opts)
    if type(key) ~= "string" or key == "" then
        if type(key) ~= "table" then bad_key("try_acquire", key) end
        key = group.keys("try_acquire", key)
    end
    local o = opts == nil and self.opts or call_opts(self, "try_acquire", opts)
    if o.limit or o.shared or type(key) == "table" then o = kind_opts(self, "try_acquire", key, o) end
    if self.closed then return closed() end
    local renewer = self.renewer
    if renewer and (self.polls or renewer:pending()) then dispatch(self) end
    return acquire(self, key, o, 0, o.renew == true)
end

-- (defined with Lock below; with_lock's finish calls them)
local release, lock_ended

local function callable(f)
    if type(f) == "function" then return true end
    local mt = type(f) == "table" and getmetatable(f)
    return mt and mt.__call ~= nil
end

-- The end of with_lock, with fn's pcall results passed on as values (no
-- table per call): on_lost runs before the release; fn's error, else
-- on_lost's, is raised again after it.
local function finish(client, lock, ok, ...)
    local told, terr = true, nil
    local renewer = client.renewer
    if renewer and (client.polls or renewer:pending()) then told, terr = pcall(dispatch, client) end
    -- (Lock:release without its dispatch, just made)
    local released, rerr, rcode = lock_ended(lock, "released", release(lock, true))
    if not ok then error((...), 0) end
    if not told then error(terr, 0) end
    if not released then return nil, rerr, rcode end
    return true, ...
end

--- Runs `fn(lock)` while holding the lock on `key`, then releases it.
-- The lock is renewed in the background while fn runs (opts.renew, default
-- true here), while it runs (or up to opts.max_hold, when given).
-- Returns true and every result of fn; nil, message, code when the lock
-- could not be taken (fn is not called) or was lost before the release
-- ("not owner"). If fn raises, the lock is released and the same error
-- value is raised again (as is an error raised by opts.on_lost).
-- @tparam string key
-- @tparam[opt] table opts as for acquire
-- @tparam function fn called as fn(lock)
-- @return true, fn's results; or nil, message, code
function Client:with_lock(key, opts, fn)
    -- (type() first: callable() is a call, and functions are the usual case)
    if fn == nil and (type(opts) == "function" or callable(opts)) then opts, fn = nil, opts end
    if type(key) ~= "string" or key == "" then
        if type(key) ~= "table" then bad_key("with_lock", key) end
        key = group.keys("with_lock", key)
    end
    if type(fn) ~= "function" and not callable(fn) then
        error(format("bad argument #%d to 'with_lock' (function expected, got %s)",
            opts == nil and 2 or 3, type(fn)), 2)
    end
    local o = opts == nil and self.opts or call_opts(self, "with_lock", opts)
    if o.limit or o.shared or type(key) == "table" then o = kind_opts(self, "with_lock", key, o) end
    if self.closed then return closed() end
    local renewer = self.renewer
    if renewer and (self.polls or renewer:pending()) then dispatch(self) end
    local lock, err, code = acquire(self, key, o, o.wait, o.renew ~= false)
    if not lock then return nil, err, code end
    return finish(self, lock, pcall(fn, lock))
end

--- The lock mode a server runs in: "script", "legacy", or nil while mode
-- "auto" has not yet met that server (it decides on the first use that
-- reaches it). Does no I/O.
-- @tparam[opt=1] number|string server its index in opts.servers, or its name
--   as messages show it ("127.0.0.1:6379", "unix:/path")
-- @treturn string|nil
function Client:mode(server)
    local s
    if server == nil or type(server) == "number" then
        s = self.servers[server or 1]
    elseif type(server) == "string" then
        for _, v in ipairs(self.servers) do
            if v.name == server then s = v end
        end
    else
        error(format("bad argument #1 to 'mode' (number or string expected, got %s)", type(server)), 2)
    end
    if not s then error(format("bad argument #1 to 'mode' (no server %s)", tostring(server)), 2) end
    if self.closed then return closed() end
    return s:chosen_mode()
end

--- Counters of what this client's locks did, always kept (see
-- docs/events.md): acquired, refused, timeout, quorum_failed, released,
-- not_owner, extended, lost, server_error, hook_errors, renewed (by the
-- renewal thread); wait = {count, sum, max, buckets} (ms from the call
-- to the end of every acquire, buckets cumulative {le = ms, count = n});
-- servers = {[name] = {errors = n}}. Does no I/O; works on a closed client.
-- @tparam[opt=false] boolean reset zero the counters after reading them
-- @treturn table a fresh table
function Client:stats(reset)
    if reset ~= nil and type(reset) ~= "boolean" then
        error(format("bad argument #1 to 'stats' (boolean expected, got %s)", type(reset)), 2)
    end
    local renewer, renewals = self.renewer, 0
    if renewer and not self.closed then
        local _, made = renewer:stats()
        renewals = math.floor(made)
    end
    local out = events.snapshot(self, renewals - self.renewals_base, reset)
    if reset then self.renewals_base = renewals end
    return out
end

--- Closes every connection. Idempotent; afterwards every call returns
-- nil, "closed: ...", "closed".
function Client:close()
    if self.closed then return true end
    dispatch(self)
    self.closed = true
    hold.close(self) -- joins the renewal thread first: it uses no conn of ours
    for _, server in ipairs(self.servers) do server:close() end
    return true
end

Client.__close = Client.close

function Client:__tostring()
    if self.closed then return "redlock.client (closed)" end
    local names = {}
    for i, server in ipairs(self.servers) do names[i] = server.name end
    return "redlock.client (" .. table.concat(names, ", ") .. ")"
end

--- A held lock, returned by `Client:acquire` and `Client:try_acquire`.
-- In Lua 5.4, `local lock <close> = ...` releases it at the end of the scope.
-- @type Lock

--- The key.
-- @field key

--- This holder's token: 32 hex chars, the value stored in Redis.
-- @field token

--- Integer fencing token, strictly increasing per key: pass it with every
-- write to the protected resource, which rejects writes with a smaller one.
-- @field fence

--- How many replicas acknowledged the write that gave the lock its
-- validity (opts.replicas: WAIT, or WAITAOF with opts.aof; Redlock: the
-- smallest count among the servers that granted it). 0 when the lock did
-- not ask (replicas = 0 and aof false): nothing was waited for.
-- @field replicas

--- Milliseconds of validity left, as this client knows it: counted from
-- before the acquire, last extend or last background renewal request was
-- sent, less the drift allowance. Never below 0; 0 once known lost.
-- @treturn number ms
function Lock:remaining()
    dispatch(self.client)
    if self.released or self.lost_reason then return 0 end
    return max(0, floor(hold.expires(self) - now()))
end

--- Whether this lock is known lost, answered from memory (no I/O).
-- @treturn boolean true, reason ("gone": a renewal, extend or release found
--   the token gone; "expired": the validity ran out before a renewal;
--   "max_hold": renewal stopped at max_hold and the validity ran out),
--   or false (held as far as this client knows, or released by it)
function Lock:lost()
    dispatch(self.client)
    local why = hold.lost(self)
    if why then return true, why end
    return false
end

-- The end of an extend or release (verb: the event of a success): counted
-- in stats() and, with a hook, told. Passes the outcome on.
local LOCK_KIND = { ["not owner"] = "not_owner", closed = false }
function lock_ended(lock, verb, ok, err, code)
    local kind = ok and verb or LOCK_KIND[code]
    if kind == nil then kind = "server_error" end
    if kind then
        local client = lock.client
        local st = client.st
        st[kind] = st[kind] + 1
        if kind == "server_error" and client.one then
            client.one.errors = (client.one.errors or 0) + 1
        end
        local hook = lock.on_event
        if hook then
            emit(client, hook, { type = kind, key = show_key(lock.key), fence = lock.fence, err = err,
                code = code })
        end
    end
    return ok, err, code
end

local function not_owner(lock, where, how)
    return nil, format("not owner: %s is no longer held by this lock on %s (%s)",
        show_key(lock.key), where, how), "not owner"
end

local function extend(self, ttl)
    if ttl ~= nil then
        options.checks.positive_integer("extend", "ttl", ttl)
    end
    ttl = ttl or self.ttl
    local client = self.client
    if client.closed then return closed() end
    dispatch(client)
    if self.released then return not_owner(self, "this client", "already released") end
    local t0 = now()
    local rep = self.rep
    local ok, where, code = (self.strategy or client.strategy).extend(client, self.key, self.token, ttl, rep)
    if ok then
        self.expires = expiry(client, t0, ttl)
        self.ttl = ttl
        if rep then self.replicas = where end
        hold.extended(self)
        return true
    end
    if ok == false then
        self.expires = 0
        hold.found_gone(self)
        return not_owner(self, where, "it expired or was taken over")
    end
    if code == "replicas" then
        -- not acknowledged: the validity stays what the last acknowledged
        -- write gave (the master may hold the key longer)
        return nil, format("%s (extending %s; the lock keeps its previous validity)", where,
            show_key(self.key)), code
    end
    return nil, format("%s (extending %s)", where, show_key(self.key)), code
end

-- dispatched: the caller has just run hold.dispatch (with_lock's finish)
function release(self, dispatched)
    local client = self.client
    if client.closed then return closed() end
    local renewer = client.renewer
    if renewer and not dispatched and (client.polls or renewer:pending()) then dispatch(client) end
    if self.released then return not_owner(self, "this client", "already released") end
    -- (a lock without renewal, re-entrance or a known loss skips hold's work)
    local lost = (self.renewal or self.lost_reason) and hold.renewal_lost(self)
    if self.holds > 1 then
        self.holds = self.holds - 1
        if lost then return not_owner(self, "this client", "lost: " .. lost) end
        return true
    end
    if self.renewal then hold.stop(self) end
    local ok, where, code
    local server, key = client.one, self.key
    -- (a mode "auto" server that took this lock in legacy mode releases it
    -- the legacy way, see redlock.detect.ops_for)
    if server and server.ops == scripted and not self.strategy
        and (not server.legacy_held or ops_for(server, self.token) == scripted) then
        -- one server in script mode: redlock.scripted's release called from
        -- here, as the first attempt is (the strategy's layers add nothing)
        ok, where, code = scripted.release(server, key, self.token)
        if not ok then ok, where, code = single.released(server, ok, where, code) end
    else
        ok, where, code = (self.strategy or client.strategy).release(client, key, self.token)
    end
    if ok then
        self.released = true
        if client.holds and self.owner ~= nil then hold.forget(self) end
        -- (deleted, but the renewal had found it gone meanwhile: a success
        -- names no server, so name the one there is, or this client)
        if lost then
            return not_owner(self, server and server:where() or "this client", "lost: " .. lost)
        end
        return true
    end
    if ok == false then
        self.released = true
        hold.forget(self)
        hold.found_gone(self)
        return not_owner(self, where, lost and "lost: " .. lost or "it expired or was taken over")
    end
    return nil, format("%s (releasing %s)", where, show_key(self.key)), code
end

--- Extends the lock to `ttl` ms from now (default: the ttl it was taken
-- with), only if this lock still holds it.
-- @tparam[opt] integer ttl ms
-- @treturn true|nil true, or nil, message, code (not owner, connection, ...)
function Lock:extend(ttl) return lock_ended(self, "extended", extend(self, ttl)) end

--- Releases the lock if this lock still holds it. Releasing a lock already
-- released, expired or taken over returns nil, "not owner: ...", as does
-- releasing a lock its renewal found lost (the key is still deleted if
-- it holds our token). A re-entrant lock held more than once only counts
-- one hold down; the last release deletes the key.
-- @treturn true|nil true, or nil, message, code
function Lock:release() return lock_ended(self, "released", release(self)) end

-- Lua 5.4: `local lock <close> = ...` releases at the end of the scope.
function Lock:__close()
    if not self.released and not self.client.closed then self:release() end
end

function Lock:__tostring()
    if self.keys then
        return format("redlock.lock (%s, a group%s)", show_key(self.keys),
            self.released and ", released" or "")
    end
    return format("redlock.lock (%s, fence %s%s)", show_key(self.key), tostring(self.fence),
        self.released and ", released" or "")
end

_M.Client, _M.Lock = Client, Lock


return _M
