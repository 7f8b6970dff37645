--- Counting semaphores (opts.limit = N): at most N holders of one key at
-- once, each a lock of its own (a permit: token, fence, ttl, extend,
-- release). Internal; redlock.lua takes this strategy instead of the
-- client's for a call with a limit.
--
-- The permits live in the lock key itself, a sorted set of token -> expiry
-- (server ms) with the limit as a member "limit" of score -N; the key's
-- PEXPIRE is the latest permit's expiry, and every script drops the
-- expired permits first, so each permit expires on its own (see the
-- scripts/sem_*.lua). Waiting is the single lock's notified
-- waiting (redlock.notify: the same waiters queue and hand-off lists): a
-- permit given back goes to the first waiter in the same step. Extending
-- a permit is the single lock's extend (one script for both), which is
-- what lets the renewal thread renew permits.
--
-- One server only (plain, replicas, Sentinel, Cluster): over independent
-- Redlock masters N permits per server do not bound the holders (two
-- majorities overlap on different servers), so the client refuses it.
local util = require "redlock.util"
local notify = require "redlock.notify"
local replicas = require "redlock.replicas"
local single = require "redlock.single"
local options = require "redlock.options"
local detect = require "redlock.detect"
local scripted = require "redlock.scripted"

local ms_string, fence_counter = util.ms_string, util.fence_counter
local waiters_key, data_key, handoff_key, wake_key, handoff_prefix =
    notify.waiters_key, notify.data_key, notify.handoff_key, notify.wake_key, notify.handoff_prefix
local format, type, error, tostring = string.format, type, error, tostring

local _M = {}

--- opts.limit: at most this many holders of the key at once (a counting
-- semaphore); nil: a single lock.
options.CALL.limit = function(fname, name, v)
    if type(v) ~= "number" or v < 1 or v % 1 ~= 0 or v > 1000000 then
        error(format("bad option '%s' to '%s' (integer from 1 to 1000000 expected, got %s)", name, fname,
            tostring(v)), 5)
    end
    return v
end

--- The misuse answer ({2, M} from a script): redlock.util.misuse.
_M.misuse = util.misuse

--- A failure of a kind's acquire, said plainly when the server refuses
-- scripting (mode "auto" before it has decided: the kinds have no legacy
-- way). what: "a permit", ...
function _M.needs_scripts(server, what, err, code)
    if code == "server" and detect.refused(err) then
        -- (Redis echoes an unknown command's arguments, the token among them)
        local why = err:gsub(", with args beginning with:.*$", ""):gsub("^server: [^:]*:[^:]*: ", "")
        return format("server: %s: %s needs the server's scripts, which it refuses (%s)", server.name, what,
            why), code
    end
    return err, code
end

-- The acquire script's answer: true, fence | false, ms | nil, err, code.
-- what: the script's name; limit: the semaphore's (nil for readers).
local function answer(server, key, what, limit, taken, v, at, asked)
    if taken == 1 and v then return true, v end
    if taken == 0 and v then
        if at then notify.set_refused_at(server, at) end
        return false, v
    end
    if taken == 2 then return _M.misuse(key, v, limit, server, asked) end
    if taken == nil then return nil, v, at end
    return util.unexpected(server, what, taken)
end


-- bound: the release's (fair = false, see redlock.scripted.release), or nil
local function release(server, name, key, token, bound)
    local r, err, code
    if bound then
        r, err, code = server:eval(name, 5, key, waiters_key(key), data_key(key), wake_key(key),
            fence_counter(key, server.slot_fences), token, handoff_prefix(key), bound)
    else
        r, err, code = server:eval(name, 5, key, waiters_key(key), data_key(key), wake_key(key),
            fence_counter(key, server.slot_fences), token, handoff_prefix(key))
    end
    if r == nil then return nil, err, code end
    if r == 2 then return _M.misuse(key, 0, true, server) end -- (SEM_RELEASE: no semaphore there)
    return r == 1 or r == 3
end

-- With replica acknowledgement: the script and WAIT in one write; a permit
-- taken but not acknowledged is given back (fail closed).
local function acquire_acked(server, kind, key, token, rep, nkeys, ...)
    local conn, name = server.conn, kind.scripts[1]
    local acked, fsynced, taken, v, at = conn:eval_wait(name, rep.replicas, rep.replica_timeout, rep.aof,
        nkeys, ...)
    if acked == nil then return nil, fsynced, taken end
    local wrote = taken == 1 and v ~= nil
    if acked ~= false and not wrote then
        return answer(server, key, name, kind.limit, taken, v, at, kind.asked)
    end
    local msg, code
    if acked == false then
        msg, code = replicas.wait_failed(server.name, rep, fsynced)
    else
        msg, code = replicas.shortfall(server.name, rep, acked, fsynced, "the " .. kind.what), "replicas"
        if not msg then return true, v, acked end
    end
    if wrote then return nil, replicas.released(msg, release(server, kind.scripts[2], key, token)), code end
    return nil, msg, code
end

--- A strategy (as redlock.single's) for holders kept in the key's sorted
-- set: name, what ("permit", "read lock"), scripts {acquire, release},
-- limit (nil for readers: the acquire script then takes no limit
-- argument). Waiting, giving up and extending are the single lock's.
function _M.make(name, what, scripts, limit)
    local s = { name = name, what = what, scripts = scripts, limit = limit, asked = "a " .. what,
        shared = name == "shared" }
    local limit_s = limit and format("%d", limit)
    local acquire_name, release_name = scripts[1], scripts[2]
    -- the script's arguments: token, ttl, [limit,] waiting, how, fenced[,
    -- bound: a semaphore's caller with fair = false passes waiters younger
    -- than that, see scripts/sem_acquire.lua]
    local function args(token, ttl, waiting, how, fenced, bound)
        if limit_s then
            if bound then return token, ms_string(ttl), limit_s, waiting or "0", how, fenced, bound end
            return token, ms_string(ttl), limit_s, waiting or "0", how, fenced
        end
        return token, ms_string(ttl), waiting or "0", how, fenced
    end
    -- (inside nginx, the worker's subscriber gives back a permit handed to
    -- a waiter whose request has ended: redlock.nginx.wait; bound: a release's
    -- with fair = false)
    local function give_back(server, key, token, bound)
        return release(server, release_name, key, token, bound)
    end
    function s.acquire(client, key, token, ttl, waiting, handoff, unfenced, rep, _, bound)
        local server = client.servers[1]
        local undecided = server.ops == detect
        if undecided then
            local ok, err, code = detect.settle(server, s.asked)
            if not ok then return single.acquired(server, nil, err, code) end
        end
        local fenced = unfenced and "0" or "1"
        local hkey, fkey = handoff_key(key, token), fence_counter(key, server.slot_fences)
        local ok, v, code
        if rep then
            -- (a holder that waits for replicas is never handed over: woken)
            ok, v, code = acquire_acked(server, s, key, token, rep, 5, key, waiters_key(key), data_key(key),
                hkey, fkey, args(token, ttl, waiting, "w", fenced, bound))
        else
            local how = scripted.how(server, handoff, key, token, give_back)
            local taken, r, at = server.conn:eval_values(acquire_name, 5, key, waiters_key(key),
                data_key(key), hkey, fkey, args(token, ttl, waiting, how, fenced, bound))
            ok, v, code = answer(server, key, acquire_name, limit, taken, r, at, s.asked)
        end
        if undecided then detect.settled(server, ok ~= nil or code == "misuse", v, code) end
        if code == "misuse" then return nil, v, code end
        if ok == nil then v, code = _M.needs_scripts(server, s.asked, v, code) end
        return single.acquired(server, ok, v, code)
    end
    function s.release(client, key, token, bound)
        local server = client.servers[1]
        return single.released(server, give_back(server, key, token, bound))
    end
    -- one extend script for locks, permits and readers (scripts/extend.lua)
    s.extend = single.extend
    -- (the kinds run scripts in every mode: their waiters leave by script)
    function s.give_up(client, key, token)
        return scripted.give_up(client.servers[1], key, token, give_back)
    end
    function s.wait(client, key, ms, since, token, final)
        return client.servers[1]:wait(key, ms, since, token, final, give_back)
    end
    return s
end

local strategies = {}

--- The strategy of a semaphore of `limit` permits.
function _M.strategy(limit)
    local s = strategies[limit]
    if not s then
        s = _M.make("semaphore", "permit", { "sem_acquire", "sem_release" }, limit)
        strategies[limit] = s
    end
    return s
end

return _M
