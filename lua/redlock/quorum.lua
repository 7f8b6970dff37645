--- The Redlock strategy: one lock across N independent Redis masters, held
-- while a majority (floor(N/2)+1) holds it. Implements the strategy
-- interface documented at the top of redlock/single.lua. Internal.
--
-- Every request goes to all servers at once (core.fanout_eval), each with a
-- small timeout, so an attempt costs the slowest answer, not the sum. A
-- server whose connection failed or timed out is skipped (counted as
-- failed) for opts.server_backoff ms, so a dead or frozen server costs one
-- timeout per back-off, not one per call; unless the servers left cannot
-- make a majority: then every server is asked.
--
-- Servers whose operations are not the scripted ones (legacy mode) cannot
-- join a fan-out: they are asked one by one through their Server methods,
-- after the fan-out, with their own command timeout. So are servers in
-- mode "auto" whose script failed with a server error, which gives
-- Server:acquire the chance to switch them to another mode.
local core = require "redlock.core"
local scripted = require "redlock.scripted"
local detect = require "redlock.detect"
local legacy = require "redlock.legacy"
local lock_ops = require "redlock.ops"
local replicas = require "redlock.replicas"
local events = require "redlock.events"
local eviction = require "redlock.eviction"
local util = require "redlock.util"
local notify = require "redlock.notify"

local now = core.now
local show_key, pause = util.show_key, util.pause
local fence_key = scripted.fence_key
local format, find, sub = string.format, string.find, string.sub
local floor, min, max = math.floor, math.min, math.max
local concat, sort = table.concat, table.sort
local ipairs, pairs, type, setmetatable, select = ipairs, pairs, type, setmetatable, select
local unpack = table.unpack or unpack -- luacheck: ignore 143

local _M = { name = "quorum" }

-- A release's attempts at most (see release; docs/topologies.md).
local RELEASE_ATTEMPTS = 3

--- How many servers make a majority of n.
function _M.quorum(n) return floor(n / 2) + 1 end

--- The per-server timeout of a fan-out, ms: opts.server_timeout, else
-- ttl/200 kept within 10..50 (the Redis documentation suggests 5-50 ms for
-- a 10 s ttl; below 10 ms a busy host misses it too often).
function _M.server_timeout(client, ttl)
    return client.opts.server_timeout or min(core.defaults.server_timeout, max(10, floor(ttl / 200)))
end

--- Raises unless the servers are distinct: two entries for one Redis
-- (even with different db numbers) would give it two votes.
function _M.check_servers(servers)
    local seen = {}
    for i, server in ipairs(servers) do
        local first = seen[server.name]
        if first then
            error(format("bad option 'servers' to 'new' (server #%d is server #%d again: %s;"
                .. " Redlock needs independent servers)", i, first, server.name), 3)
        end
        seen[server.name] = i
    end
end

-- Servers that run the scripts, and auto-mode servers not yet decided, go
-- through the fan-out: a dead or frozen one then costs server_timeout, not
-- the connection's timeout. A script that runs there settles the server as
-- a script server; a refusal comes back as a server error and takes the
-- one-by-one path below, where redlock.detect decides.
-- (A server that holds locks auto mode took in legacy mode goes one by one:
-- Server:release and extend pick each lock's operations, see
-- redlock.detect.ops_for.)
local function fanout_ops(server)
    return (server.ops == scripted or server.ops == detect) and not detect.holds_legacy(server)
end

-- The indices of the servers to ask now: those not in back-off; every
-- server when those are fewer than need (a majority, for a call that needs
-- one): skipping the others would fail the call unasked.
local function up(client, t, need)
    local live, skipped = {}, nil
    for i, server in ipairs(client.servers) do
        local d = server.down_until
        if d and d > t then
            skipped = skipped or {}
            skipped[#skipped + 1] = i
        else
            live[#live + 1] = i
        end
    end
    if skipped and need and #live < need then
        for i = 1, #client.servers do live[i] = i end
        skipped = nil
    end
    return live, skipped
end

-- Asks the servers listed (indices) in one fan-out of a named script, the
-- others one by one with seq(server). interpret(server, reply) turns a
-- script reply into what the Server method would return (and, 4th, what
-- else the reply says: `extra`). Returns, by
-- position in list: st (true | false | nil), v (the value, or the error
-- message), codes and flags ("timeout") of the failures. A connection that
-- the server had closed while idle is retried once on a fresh one.
-- rep: the options of a lock that waits for replicas (redlock.replicas):
-- WAIT goes with the script to each server, and a server where the script
-- wrote (st true) but too few replicas acknowledged counts as failed (code
-- "replicas"); acked[j] is the count where it was enough.
-- The seq functions of other kinds (see _M.of): they only say the server
-- cannot run those scripts, so a script's own server error stands.
local only_cannot = setmetatable({}, { __mode = "k" })

local function ask(client, list, timeout, name, interpret, seq, rep, ...)
    local servers = client.servers
    local st, v, codes, flags, acked, waitfail, extra = {}, {}, {}, {}, {}, {}, {}
    local conns, pos = {}, {}
    for j, i in ipairs(list) do
        if fanout_ops(servers[i]) then
            conns[#conns + 1] = servers[i].conn
            pos[#pos + 1] = j
        end
    end
    if #conns > 0 then
        -- the transport's fan-out: poll() over hiredis, or nginx light threads
        local fanout_eval = client.transport.fanout_eval
        local fanout_wait = client.transport.fanout_eval_wait
        local function send(cs, ...)
            if rep then
                return fanout_wait(cs, timeout, rep.replicas, rep.replica_timeout, rep.aof, name, ...)
            end
            return fanout_eval(cs, timeout, name, ...)
        end
        -- (a stale connection, a redirection, a master turned replica:
        -- the fan-out sends again itself, as the topology core says)
        local vals, errs, cods, flgs, acks, fsyncs = send(conns, ...)
        for k = 1, #conns do
            local j = pos[k]
            if vals[k] ~= nil then
                local server = servers[list[j]]
                if server.ops == detect then server.ops = scripted end
                st[j], v[j], codes[j], extra[j] = interpret(server, vals[k])
                if rep then
                    local a = acks[k]
                    local msg, code
                    if type(a) == "string" then
                        msg, code = replicas.wait_failed(server.name, rep, a)
                    else
                        msg, code = replicas.shortfall(server.name, rep, a, fsyncs[k],
                            "the write"), "replicas"
                    end
                    -- (a refusal stays one, unless WAIT itself failed)
                    if msg and (st[j] or type(a) == "string") then
                        st[j], v[j], codes[j] = nil, msg, code
                        waitfail[j] = true
                    elseif st[j] then
                        acked[j] = a
                    end
                end
            else
                st[j], v[j], codes[j], flags[j] = nil, errs[k], cods[k], flgs[k]
            end
        end
    end
    for j, i in ipairs(list) do
        local server = servers[i]
        if not fanout_ops(server) or (codes[j] == "server" and server.mode == "auto"
            and not waitfail[j] and not only_cannot[seq]) then
            local a, b, c = seq(server)
            st[j], v[j], codes[j], flags[j] = a, b, c, nil
            if a and rep then -- acquire: true, fence, acked; extend: true, acked
                acked[j] = name == "acquire" and c or b
                codes[j] = nil
            end
        end
    end
    return st, v, codes, flags, acked, extra
end

-- "what" of one server's failure, without the code word and the server's
-- name that the message repeats.
local function failure_text(server, msg, code, flag)
    local name = server.name
    local at = find(msg, name .. ": ", 1, true)
    local rest = at and sub(msg, at + #name + 2) or msg
    if flag == "timeout" then return rest end
    if code == "connection" then return "error: " .. rest end
    return "error: " .. code .. ": " .. rest
end

-- Connection failures (timeouts included) put a server in back-off; what
-- failed is kept for the messages that say it was skipped.
local function mark_down(client, list, st, v, codes, flags, t)
    local backoff = client.opts.server_backoff
    if backoff <= 0 then return end
    for j, i in ipairs(list) do
        if st[j] == nil and codes[j] == "connection" then
            local server = client.servers[i]
            server.down_until = t + backoff
            server.down_why = failure_text(server, v[j], codes[j], flags[j])
        end
    end
end

local unexpected, misuse = util.unexpected, util.misuse

-- (a refusal's 4th: the caller's place on that server, see place_of)
local function acquire_reply(server, r)
    if type(r) ~= "table" then return unexpected(server, "acquire", r) end
    if r[1] == 1 then return true, r[2] end
    return false, r[2], nil, r[4]
end

local flag_reply = lock_ops.flag

-- The single lock, in the shape of another kind's op (see _M.of): its
-- scripts and their arguments are redlock.ops's; a server outside the
-- fan-out runs the Server method (any mode: seq).
local OPS = lock_ops.list
local waiters_key, data_key, handoff_key, wake_key, handoff_prefix =
    notify.waiters_key, notify.data_key, notify.handoff_key, notify.wake_key, notify.handoff_prefix

-- The trailing arguments of a Redlock waiter's acquire (scripts/acquire.lua's
-- ARGV[5] to [7]): the bound, then, when known, the last attempt's token
-- ("" for none, before a score) and the waiter's score (see place_of).
local function trail(prev, score)
    if score then return notify.BARGE_MS, prev or "", score end
    if prev then return notify.BARGE_MS, prev end
    return notify.BARGE_MS
end
_M.trail = trail

-- The single lock's acquire over Redlock. how (set: notified waiting, see
-- scripts/acquire.lua's ARGV[5]): the four- or five-key form, which keeps a
-- free key from a newcomer while the front waiter has waited
-- notify.BARGE_MS (whatever fair says), and puts a waiter (waiting: ms of
-- its next block; else the caller does not wait) in each refusing server's
-- queue as one that is only woken ("o": on its own hand-off list; "w"
-- inside nginx): no release hands one server's key to a Redlock waiter.
-- place: the waiter's (see acquire): its last attempt's token, whose
-- place passes to this one, and its score.
local function lock_acquire_args(key, token, ttl_s, unfenced, fkey, waiting, how, place)
    if not how then return OPS.acquire.quorum_args(key, token, ttl_s, unfenced, fkey) end
    waiting = waiting or "0"
    local prev, score = place and place.prev, place and place.score
    if unfenced then
        return 4, key, waiters_key(key), data_key(key), handoff_key(key, token), token, ttl_s, waiting, how,
            trail(prev, score)
    end
    return 5, key, waiters_key(key), data_key(key), handoff_key(key, token), fkey, token, ttl_s, waiting, how,
        trail(prev, score)
end

local LOCK = {
    acquire_script = OPS.acquire.script, acquire_args = lock_acquire_args,
    acquire_reply = acquire_reply,
    release_script = OPS.release.script, release_args = OPS.release.quorum_args,
    release_reply = flag_reply,
    extend_script = OPS.extend.script, extend_args = OPS.extend.quorum_args,
}

-- Per-server detail for a message, in server order.
local function details(client, list, skipped, st, v, codes, flags, yes, no, t)
    local servers, out = client.servers, {}
    for j, i in ipairs(list) do
        local server = servers[i]
        local text
        if st[j] then
            text = server.name .. ": " .. yes
        elseif st[j] == false then
            text = server.name .. ": " .. no
            if type(v[j]) == "number" then
                text = text .. (v[j] >= 0 and format(" (expires in %d ms)", v[j]) or " (no ttl)")
            end
        else
            text = server.name .. ": " .. failure_text(server, v[j], codes[j], flags[j])
        end
        out[i] = text
    end
    for _, i in ipairs(skipped or {}) do
        local server = servers[i]
        out[i] = format("%s: skipped, it failed recently (%s; next try in %d ms)", server.name,
            server.down_why, max(0, floor(server.down_until - t)))
    end
    local list2 = {}
    for i = 1, #servers do list2[#list2 + 1] = out[i] end
    return concat(list2, "; ")
end

-- "k of n servers (a, b, c)"
local function which(client, list, st, want)
    local names = {}
    for j, i in ipairs(list) do
        if st[j] == want then names[#names + 1] = client.servers[i].name end
    end
    if #names == 0 then return format("0 of %d servers", #client.servers) end
    return format("%d of %d servers (%s)", #names, #client.servers, concat(names, ", "))
end

local function count(list, st)
    local yes, no = 0, 0
    for j = 1, #list do
        if st[j] then yes = yes + 1 elseif st[j] == false then no = no + 1 end
    end
    return yes, no
end

local function number_reply(server, r)
    if type(r) == "number" then return true, r end
    return unexpected(server, "fence_raise", r)
end

-- sync_fence: writes the fence back to the servers that granted it. Returns
-- how many took it, and their detail for a message.
local function sync_fence(client, key, live, st, fence, timeout)
    local granted = {}
    for j, i in ipairs(live) do
        if st[j] then granted[#granted + 1] = i end
    end
    local fst, fv, fcodes, fflags = ask(client, granted, timeout, "fence_raise", number_reply,
        function(server) return legacy.raise_fence(server, fence_key(key, client.slot_fences), fence) end,
        nil, 1, fence_key(key, client.slot_fences), format("%d", fence))
    mark_down(client, granted, fst, fv, fcodes, fflags, now())
    return (count(granted, fst)), details(client, granted, nil, fst, fv, fcodes, fflags, "took it", "", now())
end

-- The single lock's two-key release (scripts/release.lua): 2 when waiters
-- queue there (then the five-key form follows), read as "waiters".
local function release2_reply(server, r)
    if r == 2 then return "waiters" end
    return flag_reply(server, r)
end
local function release5_reply(server, r)
    if r == 3 then return true, 3 end
    return flag_reply(server, r)
end

-- The single lock's release over Redlock: where waiters queue, the
-- five-key form wakes them as on one server (bound: the release's, see
-- redlock.scripted.release); a client whose last release of key woke
-- some sends that form at once.
local function lock_release_on(client, list, key, token, timeout, bound)
    local function seq(server) return server:release(key, token, bound) end
    local st, v, codes, flags
    local again = list
    if client.woke_key ~= key then
        st, v, codes, flags = ask(client, list, timeout, "release", release2_reply, seq, nil, 2, key,
            waiters_key(key), token)
        again = {}
        for j, i in ipairs(list) do
            if st[j] == "waiters" then again[#again + 1] = i end
        end
    end
    if #again > 0 then
        local fkey = fence_key(key, client.slot_fences)
        local st2, v2, codes2, flags2
        if bound then
            st2, v2, codes2, flags2 = ask(client, again, timeout, "release", release5_reply, seq, nil, 5, key,
                waiters_key(key), data_key(key), wake_key(key), fkey, token, handoff_prefix(key), bound)
        else
            st2, v2, codes2, flags2 = ask(client, again, timeout, "release", release5_reply, seq, nil, 5, key,
                waiters_key(key), data_key(key), wake_key(key), fkey, token, handoff_prefix(key))
        end
        client.woke_key = false
        for k = 1, #again do
            if v2[k] == 3 then client.woke_key = key end
        end
        if not st then
            mark_down(client, list, st2, v2, codes2, flags2, now())
            return st2, v2, codes2, flags2
        end
        local at = {}
        for j, i in ipairs(again) do at[i] = j end
        for j, i in ipairs(list) do
            local k = at[i]
            if k then st[j], v[j], codes[j], flags[j] = st2[k], v2[k], codes2[k], flags2[k] end
        end
    else
        client.woke_key = false
    end
    mark_down(client, list, st, v, codes, flags, now())
    return st, v, codes, flags
end

-- The keys a kind's release left held for their waiters (op.keys_left: a
-- group's, whose release answers {held, index...} per server, in v; keys
-- its list), each released on those servers by the single lock's five-key
-- form, which wakes them. A server where that fails counts as failed (the
-- key holds our token still: a later attempt releases it).
local function release_left(client, list, st, v, codes, flags, keys, token, timeout)
    local by, order = {}, {}
    for j in ipairs(list) do
        local r = v[j]
        if st[j] and type(r) == "table" then
            for x = 2, #r do
                local k = r[x]
                if not by[k] then by[k], order[#order + 1] = {}, k end
                by[k][#by[k] + 1] = j
            end
        end
    end
    for _, k in ipairs(order) do
        local key, at, servers = keys[k], by[k], {}
        for x, j in ipairs(at) do servers[x] = list[j] end
        local st2, v2, codes2, flags2 = ask(client, servers, timeout, "release", release5_reply,
            function(server) return server:release(key, token) end, nil, 5, key, waiters_key(key),
            data_key(key), wake_key(key), fence_key(key, client.slot_fences), token, handoff_prefix(key))
        for x, j in ipairs(at) do
            if st2[x] == nil then st[j], v[j], codes[j], flags[j] = nil, v2[x], codes2[x], flags2[x] end
        end
    end
end

-- op: another kind's operations (see _M.of), else the single lock's (LOCK).
-- bound: the single lock's release's (see lock_release_on).
local function release_on(client, list, key, token, timeout, op, bound)
    if not op then return lock_release_on(client, list, key, token, timeout, bound) end
    local st, v, codes, flags = ask(client, list, timeout, op.release_script, op.release_reply,
        op.cannot or function(server) return server:release(key, token) end, nil,
        op.release_args(key, token, fence_key(key, client.slot_fences)))
    if op.keys_left then release_left(client, list, st, v, codes, flags, key, token, timeout) end
    mark_down(client, list, st, v, codes, flags, now())
    return st, v, codes, flags
end

-- The time until enough other holders' keys expire for a majority to be
-- free: the m-th shortest pttl, m = holders - (n - quorum). -1 if never.
local function wait_hint(list, st, v, n, q)
    local pttls = {}
    for j = 1, #list do
        if st[j] == false then
            pttls[#pttls + 1] = (type(v[j]) == "number" and v[j] >= 0) and v[j] or math.huge
        end
    end
    sort(pttls)
    local p = pttls[#pttls - (n - q)]
    if not p or p == math.huge then return -1 end
    return p
end

--- Takes the lock on a majority within the validity, or releases it on
-- every server asked. Returns true, fence | false, pttl, where[, why, code]
-- (why: the message to give instead of "locked" when the attempt was not
-- refused by a majority of other holders: split votes, too slow)
-- | nil, err, "no quorum" (failures leave fewer than a majority).
-- unfenced: fence = false (no counter touched anywhere, no fence raise).
-- Counts the servers that failed (not refused) in stats().servers and,
-- with a hook (opts.on_event), tells each as a server_error event.
local function failed_servers(client, list, st, v, codes, key, hook)
    local servers = client.servers
    for j, i in ipairs(list) do
        if st[j] == nil and codes[j] then
            local server = servers[i]
            server.errors = (server.errors or 0) + 1
            if hook then
                events.emit(client, hook, { type = "server_error", key = show_key(key), server = server.name,
                    err = v[j], code = codes[j] })
            end
        end
    end
end

-- rep: the options of a lock that waits for replicas: a server counts
-- toward the majority only if enough of its replicas acknowledged; a lock
-- taken answers true, fence, acked (the smallest count among the servers
-- that granted it).
local leave_refusers

local function give_up_reply(_, r)
    return type(r) == "string"
end

-- A waiter leaves the queue of the servers listed (indices): "held" when
-- one of them has its token. (GIVE_UP)
local function leave_on(client, list, key, token, timeout)
    local st = ask(client, list, timeout, "give_up", give_up_reply,
        function(server)
            local r = server:give_up(key, token)
            return r ~= nil and r ~= false
        end, nil, 5, key, waiters_key(key), data_key(key), handoff_key(key, token), wake_key(key), token)
    for j = 1, #list do
        if st[j] then return "held" end
    end
end

function leave_refusers(client, live, st, key, token, timeout)
    local refusers = {}
    for j, i in ipairs(live) do
        if not st[j] then refusers[#refusers + 1] = i end
    end
    leave_on(client, refusers, key, token, timeout)
end

-- A caller's score (scripts/acquire.lua's ARGV[7]), once a majority
-- refused one of its attempts and said its place there (a refusal's 4th:
-- the place the server's clock gave a waiter, a group's arrival): the
-- median of those places (the lower of the middle two), as a string of
-- microseconds; else nil. One number that every server then orders the
-- caller by, whatever each one's clock said, and that a clock far off on
-- one server does not move.
local function place_of(live, st, extra, q)
    local s = {}
    for j = 1, #live do
        local p = extra[j]
        if st[j] == false and type(p) == "number" and p > 0 then s[#s + 1] = p end
    end
    if #s < q then return nil end
    sort(s)
    return format("%.0f", s[floor((#s + 1) / 2)])
end
_M.place_of = place_of

-- waiting: a notified caller's (see lock_acquire_args; the single lock's
-- only); bound: set where the newcomer rule applies (a single lock's
-- acquire or a group's, without rep); place: the caller's own over the
-- attempts of one acquire (see _M.acquire).
local function acquire(op, client, key, token, ttl, unfenced, rep, hook, waiting, bound, place)
    local n = #client.servers
    local q = _M.quorum(n)
    local t0 = now()
    local timeout = _M.server_timeout(client, ttl)
    local live, skipped = up(client, t0, q)
    local ttl_s = format("%d", ttl)
    local o = op or LOCK
    if op or rep then waiting = nil end
    if rep then bound = nil end
    local st, v, codes, flags, acked, extra = ask(client, live, timeout, o.acquire_script, o.acquire_reply,
        o.cannot or function(server) return server:acquire(key, token, ttl, nil, nil, unfenced, rep) end,
        rep, o.acquire_args(key, token, ttl_s, unfenced, fence_key(key, client.slot_fences), waiting,
            -- (inside nginx no waiter blocks on a list: the release's
            -- message on "redlock:wake" wakes it, redlock.nginx.wait)
            bound and (client.servers[1].handoff_how and "w" or "o"), place))
    local t1 = now()
    if place then
        if waiting then
            -- a waiter blocks on a server that queued it (see _M.wait)
            place.wait_on = false
            for j, i in ipairs(live) do
                if st[j] == false and not place.wait_on then place.wait_on = client.servers[i] end
            end
        end
        if bound and not place.score then place.score = place_of(live, st, extra, q) end
    end
    mark_down(client, live, st, v, codes, flags, t1)
    failed_servers(client, live, st, v, codes, key, hook)
    for j, i in ipairs(live) do
        -- a server met for the first time: can it evict a held lock? (once)
        local server = client.servers[i]
        if st[j] ~= nil and server.policy == nil then eviction.check(client, server, hook, show_key(key)) end
    end
    -- (the hook and the eviction check ran inside the attempt: counted)
    t1 = now()
    local drift = ttl * client.drift_factor + 2
    local elapsed = t1 - t0
    local granted, held = count(live, st)
    if granted >= q and ttl - elapsed - drift > 0 then
        local fence, least, value = 0, nil, nil
        if op and op.merge then
            -- several fences per server (a group): per key the largest,
            -- and the largest of all goes back to the counters
            value, fence = op.merge(key, live, st, v)
        else
            for j = 1, #live do
                if st[j] and v[j] > fence then fence = v[j] end
            end
        end
        for j = 1, #live do
            if st[j] and rep and (least == nil or acked[j] < least) then least = acked[j] end
        end
        value = value or fence
        -- the fence goes back to the servers that granted it: the next
        -- majority shares one of them, and counts past it
        -- a waiter taken off the queues of the servers that refused it:
        -- its place there would keep newcomers out (scripts/acquire.lua)
        if waiting and granted < #live then leave_refusers(client, live, st, key, token, timeout) end
        if unfenced then return true, value, least end
        local synced, detail = sync_fence(client, key, live, st, fence, timeout)
        t1 = now()
        elapsed = t1 - t0
        if synced < q then
            release_on(client, live, key, token, timeout, op)
            return nil, format("no quorum: granted by %d of %d servers, but the fence reached %d, %d needed"
                .. " (%s)", granted, n, synced, q, detail), "no quorum"
        end
        if ttl - elapsed - drift > 0 then return true, value, least end
    end
    -- Failed: take back what we got, on every server asked, those that
    -- timed out included (the request may have landed).
    release_on(client, live, key, token, timeout, op)
    local detail = details(client, live, skipped, st, v, codes, flags, "granted", "held by another owner", t1)
    if held >= q then
        return false, wait_hint(live, st, v, n, q), which(client, live, st, false)
    end
    if granted >= q then
        return false, -1, which(client, live, st, false),
            format("no quorum: the attempt took %d ms, more than the validity of a %d ms ttl (%s)",
                floor(elapsed), ttl, detail), "no quorum"
    end
    local msg = format("no quorum: granted by %d of %d servers, %d needed (%s)", granted, n, q, detail)
    for j = 1, #live do
        -- a setting the servers cannot serve is said as such, not as a vote
        if codes[j] == "server" and find(v[j], "WAITAOF needs", 1, true) then
            return nil, v[j] .. " (" .. msg .. ")", "server"
        end
    end
    if granted + held >= q then
        -- split votes between contenders: worth another try after a delay
        return false, -1, which(client, live, st, false), msg, "no quorum"
    end
    for j = 1, #live do
        -- a key held as another kind is said as such, not as a vote
        if codes[j] == "misuse" then return nil, v[j] .. " (" .. msg .. ")", "misuse" end
    end
    return nil, msg, "no quorum"
end

--- bound: set where a newcomer that came the bound after a waiter is
-- refused (redlock.acquire's acquire_bound; its value is notify.BARGE_MS,
-- whatever fair says); place: a table of the caller's own, the same over
-- the attempts of one acquire (redlock.acquire's retry; nil for a first
-- attempt), where place.prev is the last attempt's token, and the
-- attempts keep the caller's score (place_of) and the server it waits on
-- (see _M.wait): per caller, as one client serves many at once inside
-- nginx.
function _M.acquire(client, key, token, ttl, waiting, _, unfenced, rep, hook, bound, place)
    return acquire(nil, client, key, token, ttl, unfenced, rep, hook, waiting, bound, place)
end

--- A Redlock waiter (the single lock's) is only woken, never handed the
-- lock: it blocks on its hand-off list and the wake-up list of the first
-- server whose last refusal queued it (place.wait_on; that server's
-- release wakes the waiter at the front of its queue); nil (the caller
-- sleeps) when its last attempt queued it nowhere (servers failed, or it
-- waits for replicas) or that server cannot block. A hand-off's element
-- there (no script hands a Redlock waiter one server's key) is only a
-- wake-up: the next attempt counts that key as its own there.
function _M.wait(_, key, ms, since, _, final, token, place)
    local server = place and place.wait_on
    if server and server.ops == scripted then
        local r = server:wait(key, ms, since, token, final)
        if r == "handed" then return true end
        return r
    end
end
-- (a Redlock waiter is never handed the lock: redlock.acquire)
_M.hands_over = false
--- A Redlock waiter blocks at most this long (ms) before it asks again
-- (notify.RECHECK_MS on one server): each server may queue waiters that
-- came at once in another order, and a wake-up can then reach a waiter
-- that another server's front keeps out; the one that was not woken asks
-- again within this, as a polling waiter would.
_M.RECHECK_MS = 100

--- A Redlock waiter leaves the queue of every server it can reach; "held"
-- when one of them has its token (the caller releases it everywhere).
function _M.give_up(client, key, token)
    return leave_on(client, up(client, now()), key, token, _M.server_timeout(client, client.opts.ttl))
end

-- Release and extend: true on a majority; false when so many servers say
-- the key is not ours that we cannot hold a majority; else no quorum.
local function outcome(client, live, skipped, st, v, codes, flags, verb, t)
    local n = #client.servers
    local q = _M.quorum(n)
    local yes, no = count(live, st)
    if yes >= q then return true end
    if no > n - q then return false, which(client, live, st, false) end
    return nil, format("no quorum: %s on %d of %d servers, %d needed (%s)", verb, yes, n, q,
        details(client, live, skipped, st, v, codes, flags, verb, "not held", t)), "no quorum"
end

--- Deletes the key where it still holds our token, on every server, those
-- in back-off too: one that is back must not keep a copy until the ttl.
-- Each answer is bounded by server_timeout (the fan-out runs in parallel;
-- servers in legacy mode are asked one by one, each within its timeout).
-- Without a majority either way, the servers that failed are asked again
-- after the client's retry_delay plus jitter, RELEASE_ATTEMPTS attempts in
-- all at most and none after valid_until (the lock's validity end, when
-- known: past it the keys expire anyway). A server that failed after the
-- request may have reached it and then answers "not held" counts as
-- released when the release began within the validity: that request is
-- what deleted it (nobody else could hold the key then).
-- hook: the lock's on_event (a server_error per server that failed).
-- bound: the single lock's release's (see lock_release_on).
local function release(op, client, key, token, valid_until, hook, bound)
    local n = #client.servers
    local all = {}
    for i = 1, n do all[i] = i end
    local timeout = _M.server_timeout(client, client.opts.ttl)
    local t0 = now()
    local st, v, codes, flags = release_on(client, all, key, token, timeout, op, bound)
    failed_servers(client, all, st, v, codes, key, hook)
    local q, attempts, sent = _M.quorum(n), 1, {}
    while attempts < RELEASE_ATTEMPTS do
        local yes, no = count(all, st)
        if yes >= q or no > n - q then break end
        local delay = pause(client.opts)
        if valid_until and now() + delay >= valid_until then break end
        client.transport.sleep(delay)
        local again = {}
        for j = 1, n do
            if st[j] == nil then
                again[#again + 1] = j
                sent[j] = sent[j] or codes[j] == "connection"
            end
        end
        local st2, v2, codes2, flags2 = release_on(client, again, key, token, timeout, op, bound)
        failed_servers(client, again, st2, v2, codes2, key, hook)
        attempts = attempts + 1
        for k, j in ipairs(again) do
            if st2[k] == false and sent[j] and valid_until and t0 < valid_until then st2[k] = true end
            st[j], v[j], codes[j], flags[j] = st2[k], v2[k], codes2[k], flags2[k]
        end
    end
    local ok, err, code = outcome(client, all, nil, st, v, codes, flags, "released", now())
    if ok == nil and attempts > 1 then err = format("%s, %d attempts", err, attempts) end
    return ok, err, code
end

function _M.release(client, key, token, valid_until, hook, bound)
    return release(nil, client, key, token, valid_until, hook, bound)
end

--- Extends the key where it still holds our token; true only on a majority
-- within the new validity. When a majority no longer holds it, our copies
-- left on the others are deleted too. rep: as for acquire (true, acked).
local function extend(op, client, key, token, ttl, rep)
    local t0 = now()
    local timeout = _M.server_timeout(client, ttl)
    local live, skipped = up(client, t0, _M.quorum(#client.servers))
    -- (a kind without an extend script of its own: the single lock's)
    local o = op and op.extend_script and op or LOCK
    local st, v, codes, flags, acked = ask(client, live, timeout, o.extend_script, flag_reply,
        o.cannot or function(server) return server:extend(key, token, ttl, rep) end,
        rep, o.extend_args(key, token, format("%d", ttl)))
    local t1 = now()
    mark_down(client, live, st, v, codes, flags, t1)
    local ok, where, code = outcome(client, live, skipped, st, v, codes, flags, "extended", t1)
    if ok then
        local elapsed = t1 - t0
        if ttl - elapsed - (ttl * client.drift_factor + 2) > 0 then
            if not rep then return true end
            local least
            for j = 1, #live do
                if st[j] and (least == nil or acked[j] < least) then least = acked[j] end
            end
            return true, least
        end
        return nil, format("no quorum: extending took %d ms, more than the validity of a %d ms ttl",
            floor(elapsed), ttl), "no quorum"
    end
    if ok == false then release_on(client, live, key, token, timeout, op) end
    return ok, where, code
end

function _M.extend(client, key, token, ttl, rep) return extend(nil, client, key, token, ttl, rep) end

--- The Redlock strategy of another kind of lock (redlock.shared's read
-- lock, redlock.group's group lock): op names its scripts,
--   op.acquire_script, op.acquire_args(key, token, ttl_s, unfenced, fence
--   key) -> nkeys, keys..., args... (answers {1, fence...} | {0, pttl} |
--   {2, m}: misuse); op.release_script, op.release_args(key, token, fence
--   key) -> nkeys, ... (answers 1 or 3, or {held, ...}, | 0 or {0});
--   op.what ("a read lock"); optionally op.keys_left (see release_left),
--   op.extend_script and
--   op.extend_args(key, token, ttl_s) (answers 1 | 0; else the single
--   lock's extend script), op.granted(server, reply) -> true, value (what
--   a server's grant answers; else its fence) and op.merge(key, live, st,
--   v) -> value, largest fence (what the granting servers' values come to).
-- Servers that cannot run its scripts (legacy mode) count as failed.
function _M.of(op)
    op.acquire_reply = function(server, r)
        if type(r) == "table" and r[1] == 2 then
            return misuse(nil, r[2], nil, server, op.what)
        end
        if op.granted and type(r) == "table" and r[1] == 1 then return op.granted(server, r) end
        return acquire_reply(server, r)
    end
    op.release_reply = function(server, r)
        -- (a table: {held, ...}, kept as the value, see release_left)
        if type(r) == "table" then return r[1] > 0 and true or false, r end
        if r == 1 or r == 3 then return true end
        if r == 0 then return false end
        return unexpected(server, op.release_script, r)
    end
    op.cannot = function(server) return lock_ops.cannot(server, op.what, " (legacy mode)") end
    only_cannot[op.cannot] = true
    return {
        name = "quorum",
        acquire = function(client, key, token, ttl, _, _, unfenced, rep, hook, bound, place)
            return acquire(op, client, key, token, ttl, unfenced, rep, hook, nil, bound, place)
        end,
        release = function(client, key, token, valid_until, hook)
            return release(op, client, key, token, valid_until, hook)
        end,
        extend = function(client, key, token, ttl, rep) return extend(op, client, key, token, ttl, rep) end,
    }
end

-- The operations of redlock.ops made from their entry (`args`, a 1 | 0
-- answer) that have no policy above: their script sent to every server in
-- reach at once (a server outside the fan-out runs the Server method);
-- true on a majority of 1, false when so many say 0 that no majority can
-- hold, else no quorum: release's and extend's reading (without extend's
-- validity, which is extend's own).
for name, op in pairs(lock_ops.list) do
    if op.args and op.single == "flag" and not _M[name] then
        local script, args, what = op.script, op.args, op.what
        _M[name] = function(client, key, token, ...)
            local rest = { n = select("#", ...), ... }
            local live, skipped = up(client, now(), _M.quorum(#client.servers))
            local function seq(server) return server[name](server, key, token, unpack(rest, 1, rest.n)) end
            local st, v, codes, flags = ask(client, live, _M.server_timeout(client, client.opts.ttl), script,
                flag_reply, seq, nil, args(client, key, token, ...))
            local t = now()
            mark_down(client, live, st, v, codes, flags, t)
            return outcome(client, live, skipped, st, v, codes, flags, what, t)
        end
    end
end

return _M
