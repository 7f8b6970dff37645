--- Group locks: several keys at once, all or nothing, without deadlock.
-- Internal; redlock.lua takes this strategy instead of the client's for a
-- call whose key is a list.
--
-- Each key holds the single lock's layout (`SET key <token> PX ttl`, one
-- token for the whole group), so a group and a single lock (or another
-- group, or redis-py) of one of its keys exclude each other. On one server
-- (plain, replicas, Sentinel) one script takes every key or none
-- (scripts/group_acquire.lua). On a Cluster a script's keys must
-- share a hash slot: the keys are grouped by slot, the slots taken in
-- ascending order, one script each; a refusal or a failure at one slot
-- gives back the slots already taken before the caller waits. Nobody
-- holds a key while waiting for another, whatever the order the keys were
-- given in: no deadlock; and two groups meet first on their lowest common
-- slot, where one of them wins.
--
-- Waiting polls (retry_delay + jitter): a release cannot hand several keys
-- to one waiter. A group's release hands each of its keys on to that key's
-- single-lock waiters, as a single lock's release does.
local core = require "redlock.core"
local util = require "redlock.util"
local scripted = require "redlock.scripted"
local replicas = require "redlock.replicas"
local semaphore = require "redlock.semaphore"
local notify = require "redlock.notify"
local quorum = require "redlock.quorum"
local detect = require "redlock.detect"

local keyslot, ms_string, fence_counter, companion_key = core.keyslot, util.ms_string, util.fence_counter,
    util.companion_key
local now = core.now
local next = next
local WAITERS = scripted.WAITERS
local type, ipairs, pairs, error, tostring, select, tonumber = type, ipairs, pairs, error, tostring, select,
    tonumber
local format, sort = string.format, table.sort
local unpack = table.unpack or unpack -- luacheck: ignore 143

local _M = {}

-- The last list of keys made (see _M.keys), and its steps.
local last, last_steps, last_per_slot = nil, nil, nil

--- A copy of keys, the lock's own (later changes to the caller's list do
-- not change what is released); raises unless keys is a list of distinct
-- non-empty strings (fname: the function's name, for the message). The
-- same keys as the last call's give the same copy (read-only: lock.keys),
-- whose steps and arguments are made once.
function _M.keys(fname, keys)
    local n = #keys
    if last and n == #last and next(keys, n) == nil then
        local same = true
        for i = 1, n do
            if keys[i] ~= last[i] then
                same = false
                break
            end
        end
        if same then return last end
    end
    if n == 0 then error(format("bad argument #1 to '%s' (empty list of keys)", fname), 3) end
    for k in pairs(keys) do
        if type(k) ~= "number" or k < 1 or k > n or k % 1 ~= 0 then
            error(format("bad argument #1 to '%s' (a list of keys expected, found field %s)", fname,
                tostring(k)), 3)
        end
    end
    local copy = {}
    for i = 1, n do
        local k = keys[i]
        if type(k) ~= "string" or k == "" then
            error(format("bad argument #1 to '%s' (key #%d: non-empty string expected, got %s)", fname, i,
                type(k) == "string" and "an empty string" or type(k)), 3)
        end
        -- (a few keys: compared pairwise, no table)
        for j = 1, i - 1 do
            if copy[j] == k then
                error(format("bad argument #1 to '%s' (key #%d repeats key #%d, %s)", fname, i, j,
                    util.show_key(k)), 3)
            end
        end
        copy[i] = k
    end
    last, last_steps = copy, nil
    return copy
end

-- The keys in the steps they are taken in: one step on one server; on a
-- Cluster (per_slot) one per hash slot, slots ascending. Each step is a
-- list of keys with .counter (the fence counter of its slot or server).
local function make_steps(keys, per_slot)
    if not per_slot then
        local all = { n = #keys }
        for i, k in ipairs(keys) do all[i] = k end
        all.counter = fence_counter(keys[1], false)
        return { all }
    end
    local by_slot, slots = {}, {}
    for _, k in ipairs(keys) do
        local s = keyslot(k)
        local step = by_slot[s]
        if not step then
            step = { n = 0, counter = fence_counter(k, true) }
            by_slot[s] = step
            slots[#slots + 1] = s
        end
        step.n = step.n + 1
        step[step.n] = k
    end
    sort(slots)
    local out = {}
    for i, s in ipairs(slots) do out[i] = by_slot[s] end
    return out
end

-- The steps of a lock's keys (a copy, see _M.keys): those of the last
-- list made are kept.
local function steps(keys, per_slot)
    if keys == last and last_steps and last_per_slot == per_slot then return last_steps end
    local m = make_steps(keys, per_slot)
    if keys == last then last_steps, last_per_slot = m, per_slot end
    return m
end

-- The keys of a step, then its waiters queues (GROUP_RELEASE's keys),
-- then the token.
local function with_queues(step, token)
    local t = { n = step.n * 2 + 1 }
    for i = 1, step.n do
        t[i] = step[i]
        t[step.n + i] = companion_key(step[i], WAITERS)
    end
    t[t.n] = token
    return t
end

-- A step's keys, then more arguments.
local function keys_then(step, ...)
    local t = { n = step.n + select("#", ...) }
    for i = 1, step.n do t[i] = step[i] end
    for i = 1, select("#", ...) do t[step.n + i] = select(i, ...) end
    return unpack(t, 1, t.n)
end

-- Releases one step: true when every key held token, false when some did
-- not (those that did are released), nil, err, code.
local function release_step(server, step, token)
    -- (made once per step: only the token changes, set before each use)
    local args = step.release_args
    if not args then
        args = with_queues(step, token)
        step.release_args = args
    end
    args[args.n] = token
    local r, err, code = server:eval("group_release", step.n * 2, unpack(args, 1, args.n))
    if r == nil then return nil, err, code end
    if type(r) ~= "table" then
        return nil, format("server: %s: unexpected reply to group_release", server.name), "server"
    end
    -- keys somebody waits for: the single lock's release hands them on
    for i = 2, #r do
        local ok, e, c = scripted.release_waking(server, step[r[i]], token)
        if ok == nil then return nil, e, c end
    end
    return r[1] == step.n
end

-- Gives back the steps before j (a failed acquire), best effort: a key
-- left behind expires with its ttl.
local function roll_back(server, list, j, token)
    for i = 1, j - 1 do release_step(server, list[i], token) end
end

-- One step's acquire: the script's reply as values, or nil, err, code;
-- with rep: acked first (WAIT in the same write).
local function take(server, step, token, ttl_s, unfenced, rep)
    local n = step.n
    local nkeys = unfenced and n or n + 1
    -- (made once per step and fence option: token and ttl set before each use)
    local field = unfenced and "acquire_unfenced" or "acquire_args"
    local args = step[field]
    if not args then
        args = { n = nkeys + 3 }
        for i = 1, n do args[i] = step[i] end
        if not unfenced then args[n + 1] = step.counter end
        args[nkeys + 3] = format("%d", n)
        step[field] = args
    end
    args[nkeys + 1], args[nkeys + 2] = token, ttl_s
    if rep then
        local conn = server.conn
        local acked, fsynced, a, b, c, d = conn:eval_wait("group_acquire", rep.replicas, rep.replica_timeout,
            rep.aof, nkeys, unpack(args, 1, args.n))
        if acked == nil then return nil, fsynced, a end
        -- (an answer of 1 to 4 integers comes as values, a longer one, a
        -- group of 4 keys or more, as one table: see conn:eval_wait)
        if type(a) == "table" then return acked, fsynced, a end
        return acked, fsynced, { a, b, c, d }
    end
    local r, err, code = server:eval("group_acquire", nkeys, unpack(args, 1, args.n))
    if r == nil then return nil, err, code end
    return true, nil, r
end

--- The strategy (as redlock.single's, without wait: waiting polls).
-- acquire answers true, {key = fence} (fences 0 without a counter)[, acked].
_M.strategy = { name = "group" }

-- The key whose queue a waiting group joined, per token (see wait), and
-- until when (monotonic ms) that wait can last: an entry whose acquire
-- ended without leaving (an error raised mid-wait) is dropped once that
-- has passed, so the table stays as small as the waits under way.
local queued, queued_until, n_queued, prune_at = {}, {}, 0, 64

local function forget(token)
    if queued[token] then
        queued[token], queued_until[token] = nil, nil
        n_queued = n_queued - 1
    end
end

local function remember(token, key, ms)
    if not queued[token] then
        n_queued = n_queued + 1
        if n_queued > prune_at then
            local t = now()
            for k, u in pairs(queued_until) do
                if u < t then forget(k) end
            end
            prune_at = 2 * n_queued + 64
        end
    end
    -- (its place lasts the block and the queue's slack: RECHECK_MS + 1 s)
    queued[token], queued_until[token] = key, now() + ms + 2000
end

-- A waiting group leaves the queue it joined (GIVE_UP, which wakes the
-- waiters behind when it leaves from the front); what it answers about
-- that key is moot: the group's own outcome says whether it holds.
local function leave_queue(server, token)
    local key = queued[token]
    if not key then return nil end
    forget(token)
    return server:eval("give_up", 5, key, notify.waiters_key(key), notify.data_key(key),
        notify.handoff_key(key, token), notify.wake_key(key), token)
end

function _M.strategy.acquire(client, keys, token, ttl, waiting, _, unfenced, rep)
    local server = client.servers[1]
    local undecided = server.ops == detect
    if undecided then
        local ok, err, code = detect.settle(server, "a group lock")
        if not ok then return server:noted(nil, err, code) end
    end
    local list, ttl_s = steps(keys, server.slot_fences), ms_string(ttl)
    local fences, least = {}, nil
    for j, step in ipairs(list) do
        local acked, fsynced, r = take(server, step, token, ttl_s, unfenced, rep)
        if undecided then
            undecided = false
            detect.settled(server, acked ~= nil, fsynced, r)
        end
        local fail, err, code
        if acked == nil then
            fail, err, code = true, fsynced, r
        elseif type(r) ~= "table" then
            fail, err = true, format("server: %s: unexpected reply to group_acquire", server.name)
            code = "server"
        elseif r[1] == 0 then
            roll_back(server, list, j, token)
            if waiting then
                -- a notified waiter: in the queue of the key that refused
                -- it, woken by that key's release (see GROUP_WAIT)
                local key = step[r[3]]
                local old = queued[token]
                if old and old ~= key then leave_queue(server, token) end
                local w = server:eval("group_wait", 4, key, notify.waiters_key(key), notify.data_key(key),
                    notify.handoff_key(key, token), token, waiting)
                if type(w) == "table" and w[1] == 0 then
                    remember(token, key, tonumber(waiting) or 0)
                    if w[3] then server.refused_at = w[3] end
                elseif type(w) == "table" and w[1] == 1 then
                    return false, 0, server:where() -- free now: at once again
                end
            end
            return false, r[2], server:where()
        elseif r[1] == 2 then
            roll_back(server, list, j, token)
            return semaphore.misuse(step[r[3]], r[2], nil, server, "a group lock's key")
        elseif rep then
            local msg
            if acked == false then
                msg, code = replicas.wait_failed(server.name, rep, fsynced)
            else
                msg, code = replicas.shortfall(server.name, rep, acked, fsynced, "the group"), "replicas"
                if not msg and (least == nil or acked < least) then least = acked end
            end
            if msg then
                roll_back(server, list, j + 1, token)
                return nil, replicas.released(msg, true), code -- (given back just above)
            end
        end
        if fail then
            -- this step may have run (a lost reply): given back with the others
            roll_back(server, list, j + 1, token)
            err, code = semaphore.needs_scripts(server, "a group lock", err, code)
            return server:noted(nil, err, code)
        end
        for i = 1, step.n do fences[step[i]] = r[i + 1] end
    end
    if queued[token] then leave_queue(server, token) end
    return true, fences, least
end

--- A waiting group blocks until the key that refused it is released (or
-- ms pass): that key's queue wakes it (redlock.notify); nil when it never
-- joined one (the caller sleeps). owner: the group's token (the fifth
-- argument, the token of a waiter that may be handed a lock, is nil for a
-- group that waits for replicas or inside nginx; a group is only woken).
function _M.strategy.wait(client, _, ms, since, _, final, owner)
    local key = owner and queued[owner]
    if not key then return nil end
    local r = client.servers[1]:wait(key, ms, since, nil, final)
    -- (a group is only ever woken: a hand-off's element cannot be for it)
    if r == "handed" then return true end
    return r
end

function _M.strategy.release(client, keys, token)
    local server = client.servers[1]
    local all, first_err, first_code = true, nil, nil
    for _, step in ipairs(steps(keys, server.slot_fences)) do
        local ok, err, code = release_step(server, step, token)
        if ok == nil then
            first_err, first_code = first_err or err, first_code or code
        elseif not ok then
            all = false
        end
    end
    if first_err then return server:noted(nil, first_err, first_code) end
    if all then return true end
    return false, server:where()
end

function _M.strategy.extend(client, keys, token, ttl, rep)
    local server = client.servers[1]
    local ttl_s, least = ms_string(ttl), nil
    for _, step in ipairs(steps(keys, server.slot_fences)) do
        local n, err, code
        if rep then
            local acked, fsynced
            acked, fsynced, n = server.conn:eval_wait("group_extend", rep.replicas, rep.replica_timeout,
                rep.aof, step.n, keys_then(step, token, ttl_s))
            if acked == nil then return server:noted(nil, fsynced, n) end
            if n ~= 1 then return false, server:where() end
            local msg
            if acked == false then
                msg, code = replicas.wait_failed(server.name, rep, fsynced)
            else
                msg, code = replicas.shortfall(server.name, rep, acked, fsynced, "the extension"), "replicas"
            end
            if msg then return nil, msg, code end
            if least == nil or acked < least then least = acked end
        else
            n, err, code = server:eval("group_extend", step.n, keys_then(step, token, ttl_s))
            if n == nil then return server:noted(nil, err, code) end
            if n ~= 1 then return false, server:where() end
        end
    end
    return true, least
end

--- A waiter that gives up leaves the queue it joined; a group is never
-- handed anything, so this answers nothing.
function _M.strategy.give_up(client, _, token)
    leave_queue(client.servers[1], token)
end

-- The keys, then more arguments (a Redlock's requests: one step).
local function list_then(keys, ...)
    local n, extra = #keys, select("#", ...)
    local t = {}
    for i = 1, n do t[i] = keys[i] end
    for i = 1, extra do t[n + i] = select(i, ...) end
    return unpack(t, 1, n + extra)
end

-- The keys, the fence counter (fkey; none when false), then each key's
-- waiters queue, then each key's waiters' data.
local function with_waiters(keys, fkey)
    local n = #keys
    local t, m = {}, fkey and n + 1 or n
    for i = 1, n do
        t[i] = keys[i]
        t[m + i] = companion_key(keys[i], WAITERS)
        t[m + n + i] = notify.data_key(keys[i])
    end
    if fkey then t[n + 1] = fkey end
    return t, m + 2 * n
end

--- The same over Redlock (servers that are not Cluster members: a group
-- takes all its keys in one script on each server): a majority must grant
-- every key; each key's fence is the largest the granting servers gave it,
-- and the largest of all goes back to their counters (one per server).
-- A group is a newcomer to each key's queue at every attempt (how set:
-- the single lock's rule, see scripts/group_acquire.lua), with its score
-- once it has one (place.score, see redlock.quorum); it takes no place:
-- its waiting polls. Its release leaves each key somebody waits for to
-- the single lock's release, which wakes them (keys_left).
_M.quorum = quorum.of {
    what = "a group lock",
    acquire_script = "group_acquire",
    acquire_args = function(keys, token, ttl_s, unfenced, fkey, _, how, place)
        local n = #keys
        if how then
            local t, m = with_waiters(keys, not unfenced and fkey)
            t[m + 1], t[m + 2], t[m + 3] = token, ttl_s, format("%d", n)
            local score = place and place.score
            t[m + 4], t[m + 5] = notify.BARGE_MS, score
            return m, unpack(t, 1, score and m + 5 or m + 4)
        end
        if unfenced then return n, list_then(keys, token, ttl_s, format("%d", n)) end
        return n + 1, list_then(keys, fkey, token, ttl_s, format("%d", n))
    end,
    granted = function(_, r) return true, { select(2, unpack(r)) } end,
    merge = function(keys, live, st, v)
        local fences, top = {}, 0
        for i, k in ipairs(keys) do
            local f = 0
            for j = 1, #live do
                if st[j] and v[j][i] > f then f = v[j][i] end
            end
            fences[k] = f
            if f > top then top = f end
        end
        return fences, top
    end,
    release_script = "group_release",
    release_args = function(keys, token)
        local n = #keys
        local t = {}
        for i = 1, n do
            t[i] = keys[i]
            t[n + i] = companion_key(keys[i], WAITERS)
        end
        t[2 * n + 1] = token
        return 2 * n, unpack(t, 1, 2 * n + 1)
    end,
    keys_left = true,
    extend_script = "group_extend",
    extend_args = function(keys, token, ttl_s) return #keys, list_then(keys, token, ttl_s) end,
}

return _M
