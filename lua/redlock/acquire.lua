--- The acquire engine: a call's options made ready (and a kind's: a
-- permit, readers, a group), the first attempt (without a script where the
-- connection can: redlock.scripted.grant), the attempts until opts.wait
-- (blocked on a release's hand-off or wake-up, or sleeping), the lock it
-- makes, and how every acquire ends (stats, events). redlock.lua's Client
-- methods call it; a lock is a Lock (this module's metatable, whose
-- methods redlock.lua defines). Internal.
local core = require "redlock.core"
local options = require "redlock.options"
local hold = require "redlock.hold"
local single = require "redlock.single"
local scripted = require "redlock.scripted"
local util = require "redlock.util"
local replicas = require "redlock.replicas"
local events = require "redlock.events"
local eviction = require "redlock.eviction"
local semaphore = require "redlock.semaphore"
local group = require "redlock.group"
local shared = require "redlock.shared"
local notify = require "redlock.notify"

local now, new_token = core.now, core.token
local show_key, pause = util.show_key, util.pause
local ms_string, fence_counter = util.ms_string, util.fence_counter
local grant = scripted.grant
local setmetatable, type, error, pairs, ipairs = setmetatable, type, error, pairs, ipairs
local format, floor, ceil, find = string.format, math.floor, math.ceil, string.find
local max, min = math.max, math.min
local RECHECK_MS = notify.RECHECK_MS
local emit, count_acquire = events.emit, events.count_acquire

local _M = {}

local Lock = {}
Lock.__index = Lock
-- A lock's fields that most locks keep at these values (see taken):
-- whether this client released it; its re-entrant holds; why it is known
-- lost (redlock.hold), else false; its renewal (redlock.hold), else false;
-- how many replicas acknowledged the write that gave its validity (0 when
-- none was waited for).
Lock.released, Lock.holds, Lock.lost_reason = false, 1, false
Lock.renewal, Lock.renewal_id, Lock.replicas = false, false, 0
-- whether its release hands the key to the front waiter whatever its wait
-- (opts.fair, redlock.notify)
Lock.fair = false

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

-- The bound an acquire passes waiters by (notified waiting), nil without:
-- a semaphore's newcomer passes waiters younger than that
-- (scripts/sem_acquire.lua; fair = true: "0", none); a Redlock's attempts
-- keep the free key for the front waiter past notify.BARGE_MS whatever it
-- says (redlock.quorum).
local function acquire_bound(o)
    if not o.notify then return nil end
    return o.fair and "0" or notify.BARGE_MS
end

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
        return client.strategy.acquire(client, key, token, o.ttl, nil, nil, unfenced, o.rep, o.on_event,
            acquire_bound(o))
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
    if not (renew or acked or o.reentrant or o.on_lost or o.kind or o.fair) then
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
        fair = o.fair,
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
-- t_end: when it ended, if known, else now; handed: a release handed it the
-- lock): counts it in stats() and, with a hook, tells it. Passes the
-- outcome on.
local function ended(client, o, key, start, attempts, lock, err, code, t_end, handed_to)
    local waited = (t_end or now()) - start
    local kind = lock and "acquired" or ACQUIRE_KIND[code] or "server_error"
    count_acquire(client.st, kind, waited)
    if not lock and kind == "server_error" and client.one then
        client.one.errors = (client.one.errors or 0) + 1
    end
    local hook = o.on_event
    if hook then
        emit(client, hook, { type = kind, key = show_key(key), waited = floor(waited), attempts = attempts,
            fence = lock and lock.fence or nil, err = err, code = code, handed = handed_to })
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
-- than now); nil when its validity has already run out (the waiter was
-- paused after the hand-off): it is nobody's to return.
local function handed(client, key, token, o, renew, t_refused, fence, since)
    local at, t = t_refused + since * (1 - client.drift_factor), now()
    if at > t then at = t end
    if at + o.valid_ms <= t then return nil end
    return taken(client, key, token, fence, o, renew, at)
end

-- A waiter that leaves the waiters queue (strategy.give_up): a lock handed
-- to it meanwhile is its own (returned); one whose hand-off it cannot know
-- (fence unknown) or whose validity ran out is released, which hands it
-- to the next waiter.
local function leave(client, key, token, o, renew, t_refused)
    local strategy = o.kind or client.strategy
    local outcome, fence, since = strategy.give_up(client, key, token)
    -- (fence 0 where one was asked for: an older client's release, which
    -- knew no fence for this waiter, handed it; released as unknown)
    if outcome == "handed" and (fence ~= 0 or not o.fence) then
        local lock = handed(client, key, token, o, renew, t_refused, fence, since)
        if lock then return lock, true end
    end
    if outcome == "held" or outcome == "handed" then strategy.release(client, key, token) end
end

-- How a waiter's acquire ends (retry), whatever it came to: inside nginx
-- its worker's subscriber stops following it (redlock.nginx.wait's done)
-- before the acquire's hook can yield; handoff, the table by which the
-- subscriber tells a live waiter from an ended one, is held here until then.
local function left_queue(server, token, handoff, client, o, key, start, attempts, lock, err, code, handed_to)
    if handoff and server and server.dequeued then server:dequeued(token) end
    return ended(client, o, key, start, attempts, lock, err, code, nil, handed_to)
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
    local pass_by = acquire_bound(o)
    -- (a Redlock waiter asks again sooner: redlock.quorum.RECHECK_MS)
    local recheck = strategy.RECHECK_MS or RECHECK_MS
    -- Redlock: each attempt its own token. A take-back sent on a new
    -- connection (one that timed out is closed) may reach a server after the
    -- next attempt's grant there, and must not delete what that attempt counts.
    -- (A waiter's place in the queues passes from one token to the next:
    -- place.prev, the last attempt's. place: this acquire's own table,
    -- which redlock.quorum keeps the caller's state in over its attempts.)
    local fresh = strategy.name == "quorum"
    local place = fresh and {} or nil
    local wait_for = o.notify and strategy.wait
    -- a notified waiter's refusals put it in the waiters queue, whose
    -- releases hand it the lock or wake it (waiting: ms it may still wait;
    -- redlock.notify); refused by the plain first attempt, it asks again
    -- at once, joining the queue this time, before it blocks
    local notified, waiting = wait_for and wait >= 1, nil
    -- a waiter that blocks on a connection of its own may be handed the
    -- lock or permit (redlock.notify), and so may a waiter inside nginx,
    -- whose worker's subscriber delivers the hand-off (redlock.nginx.wait);
    -- one whose lock must wait for replicas is woken to try again instead
    -- (and so is a group's, whatever it asks: redlock.group; a Redlock
    -- waiter is only woken: redlock.quorum); handoff,
    -- when it may: a table of this acquire's own, which only this frame
    -- holds (inside nginx the worker's subscriber holds it weakly: once it
    -- is collected, this waiter's request has ended, redlock.nginx.wait)
    local handoff = notified and not rep and strategy.hands_over ~= false and {}
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
                if notified and bound > recheck then bound, final = recheck, false end
                if bound > 0 then
                    local blocked, fence, since
                    -- (the token again last: a group's wait finds the queue it
                    -- joined by it, also when it may not be handed a lock)
                    if wait_for then
                        blocked, fence, since = wait_for(client, key, bound, t0, mine, final, token, place)
                    end
                    if blocked == "woken" then
                        -- (see notify.WOKEN_RTTS; never past the last attempt's time; a
                        -- waiter past the bound, whom no newcomer passes, tries at once)
                        local t = now()
                        local rest = min(notify.WOKEN_MS or rtt * notify.WOKEN_RTTS, deadline - t - try_cost)
                        if rest > 0 and t - start < tonumber(notify.BARGE_MS) then
                            client.transport.sleep(rest)
                        end
                    elseif blocked == "handed" then
                        -- (run out while this waiter was paused: its next
                        -- attempt asks afresh, and takes it if still its own)
                        local lock = handed(client, key, token, o, renew, t_refused, fence, since)
                        if lock then
                            return left_queue(server, token, handoff, client, o, key, start, attempts, lock,
                                nil, nil, true)
                        end
                    elseif not blocked then
                        -- a server that has just refused BLPOP: polled from now on,
                        -- so at once in the queue again as a waiter only woken
                        -- (redlock.scripted), not one a release hands the lock to
                        if mine and server and server.no_notify and not relisted then
                            relisted = true
                        else
                            client.transport.sleep(pause(o, bound))
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
                if notified then waiting = ms_string(max(1, min(recheck, ceil(deadline - t0)))) end
                if fresh then place.prev, token = token, new_token() end
                local ok, v2, where2, why2 = strategy.acquire(client, key, token, ttl, waiting, handoff,
                    unfenced, rep, hook, pass_by, place)
                attempts = attempts + 1
                local took = now() - t0
                if rtt == 0 or took < rtt then rtt = took end
                if ok then
                    if server and not waited then server.contended = false end
                    return left_queue(server, token, handoff, client, o, key, start, attempts,
                        taken(client, key, token, v2, o, renew, t0, where2))
                end
                if ok == false then
                    v, where, t_refused, why, failure = v2, where2, t0, why2, nil
                elseif where2 == "no quorum" then
                    -- (servers failed: no holder's pttl to wait for)
                    v, failure = -1, v2
                elseif not (where2 == "server" and find(v2, "TRYAGAIN", 1, true)) then
                    local lock, by
                    if waiting then lock, by = leave(client, key, token, o, renew, t_refused) end
                    if lock then
                        return left_queue(server, token, handoff, client, o, key, start, attempts, lock,
                            nil, nil, by)
                    end
                    return left_queue(server, token, handoff, client, o, key, start, attempts,
                        failed(key, v2, where2))
                end
                -- (TRYAGAIN: a Cluster slot half migrated for longer than the
                -- timeout; nothing ran, and the wait goes on as for a holder)
            end
        end
        if not tried then
            -- a waiter that gives up leaves the waiters queue now, not when
            -- the queue expires (releases would keep choosing it)
            local lock, by
            if waiting then lock, by = leave(client, key, token, o, renew, t_refused) end
            if lock then
                return left_queue(server, token, handoff, client, o, key, start, attempts, lock, nil, nil, by)
            end
            if failure then
                return left_queue(server, token, handoff, client, o, key, start, attempts,
                    failed(key, failure, "no quorum", wait, attempts))
            end
            local err, code = format("timeout: waited %d ms for %s, held by another owner on %s",
                floor(wait), show_key(key), where), "timeout"
            if why then err = err .. " (the last attempt: " .. why .. ")" end
            return left_queue(server, token, handoff, client, o, key, start, attempts, nil, err, code)
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
        ok, v, where = o.kind.acquire(client, key, token, o.ttl, nil, nil, not o.fence, o.rep, nil,
            acquire_bound(o))
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
    if wait > 0 then
        return retry(client, key, o, wait, renew, token, start, v, where, 1, nil, why)
    end
    -- a strategy may say why other than "locked" (Redlock: no quorum)
    if why then
        return ended(client, o, key, start, 1, nil, format("%s (acquiring %s)", why, show_key(key)), why_code)
    end
    -- (concatenation: try_acquire on a held key builds this every time)
    local err, code = "locked: " .. show_key(key) .. " is held by another owner on " .. where
        .. (v >= 0 and " (expires in " .. floor(v) .. " ms)" or " (expires in never: no ttl)"), "locked"
    return ended(client, o, key, start, 1, nil, err, code)
end

--- The lock metatable (redlock.lua defines its methods).
_M.Lock = Lock
_M.derive = derive
_M.call_opts = call_opts
_M.kind_opts = kind_opts
--- One attempt, or attempts until `wait` ms (client, key, o, wait, renew).
_M.acquire = acquire

return _M
