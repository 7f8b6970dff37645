--- Holding a lock: background renewal (the C watchdog of csrc/drivers/renew.c),
-- the lost-lock signal (lock:lost(), opts.on_lost) and re-entrant holds.
-- Internal; redlock.lua calls it at the points named below.
--
-- on_lost runs in the caller's own thread, never in the renewal thread: at
-- the start of every call on the client or on one of its locks (acquire,
-- try_acquire, with_lock, close, remaining, lost, extend, release), and in
-- with_lock right after fn returns or raises; also inside extend/release
-- when they are the ones to find the token gone. It runs once per lock.
local core = require "redlock.core"
local options = require "redlock.options"
local events = require "redlock.events"
local detect = require "redlock.detect"
local show_key = require("redlock.util").show_key

local ops_for = detect.ops_for

local new_renewer, now = core.renewer, core.now
local checks = options.checks
local setmetatable, ipairs, pairs, next, error, pcall = setmetatable, ipairs, pairs, next, error, pcall
local floor, format = math.floor, string.format

local _M = {}

local WEAK_V = { __mode = "v" }
local WEAK_KV = { __mode = "kv" }

-- Renewal has no bound unless opts.max_hold sets one: a lock is renewed
-- while its holder lives and holds it (as the command renews while CMD
-- runs, and the nginx timers of redlock.cosocket.renew). The renewal
-- thread's hold_until is then 2^53 ms, the largest it takes.
local NO_BOUND = 2 ^ 53
local REDLOCK_TIMEOUT = core.defaults.server_timeout

checks.owner = function(fname, name, v)
    if v ~= v then error(format("bad option '%s' to '%s' (any value but NaN expected)", name, fname), 5) end
    return v
end

-- renew: nil means "with_lock renews, acquire does not".
options.CALL.renew = checks.boolean
options.CALL.max_hold = checks.positive_integer
options.CALL.on_lost = checks.callable
options.CALL.reentrant = checks.boolean
options.CALL.owner = checks.owner
options.CALL.on_event = checks.callable
options.DEFAULTS.reentrant = false

--- Runs lock's on_lost once, the first time the library learns of the loss.
local function report(lock, why)
    if lock.lost_reported then return end
    lock.lost_reported = true
    local client = lock.client
    local st = client.st
    st.lost = st.lost + 1
    local hook = lock.on_event
    if hook then
        events.emit(client, hook, { type = "lost", key = show_key(lock.key), fence = lock.fence, err = why,
            code = "not owner" })
    end
    local on_lost = lock.on_lost
    if on_lost then on_lost(lock, why) end
end

-- Tells lock's hook of the renewals (renewed) and failed renewals
-- (renew_failed; err: the last failure) the thread made since the last
-- look; attempts: how many.
local function poll(lock)
    local h = lock.renewal
    if not h then return end
    local _, _, renewals, failures, _, err = h:state()
    local hook, client = lock.on_event, lock.client
    if failures > lock.seen_failures then
        local n = floor(failures - lock.seen_failures)
        lock.seen_failures = failures
        events.emit(client, hook, { type = "renew_failed", key = show_key(lock.key), fence = lock.fence,
            attempts = n, err = err })
    end
    if renewals > lock.seen_renewals then
        local n = floor(renewals - lock.seen_renewals)
        lock.seen_renewals = renewals
        events.emit(client, hook, { type = "renewed", key = show_key(lock.key), fence = lock.fence,
            attempts = n })
    end
end

--- Runs the on_lost of every lock the renewal thread found lost since the
-- last call, and tells the renewals of locks with opts.on_event. Cheap
-- when nothing happened: one C call, or none for a client that never
-- renewed. (The hot paths in redlock.lua ask client.polls and
-- renewer:pending() themselves and call this only then: a Lua call is most
-- of its cost.)
function _M.dispatch(client)
    local r = client.renewer
    if not r then return end
    if client.polls then
        for _, lock in pairs(client.renewing) do
            if lock.on_event then poll(lock) end
        end
    end
    if not r:pending() then return end
    local ids = r:take_lost()
    while ids do
        for _, id in ipairs(ids) do
            local lock = client.renewing[id]
            if lock then report(lock, lock.renewal:lost()) end
        end
        ids = r:take_lost()
    end
end

-- Whether token's lock is extended in legacy mode on server: the mode that
-- took it there (redlock.detect.ops_for; a server of mode "auto" may have
-- changed mode since).
local function legacy_lock(server, token) return ops_for(server, token).name == "legacy" end

-- Whether the renewal thread can extend token's lock on server: with the
-- extend script, or in legacy mode with WATCH/MULTI (redlock.legacy's
-- guarded extend, in C). A legacy server without WATCH cannot be renewed:
-- checking the token and writing would be two steps another client could
-- come between. ("auto" servers not decided yet count: they answer the
-- script or fail like a down server.)
local function can_renew(server, token)
    if not legacy_lock(server, token) then return true end
    -- a plain value (legacy_value = "plain") changes with each extend and
    -- only Lua knows the last one: the thread could not check it
    return server.caps ~= nil and server.caps.watch and not server.plain
end

-- Renewal needs a majority of servers it can extend on.
local function renewable(client, token)
    local servers = client.servers
    local n, able = #servers, 0
    for i = 1, n do
        if can_renew(servers[i], token) then able = able + 1 end
    end
    return able >= floor(n / 2) + 1
end

-- No server in legacy mode (renewer:add reads a missing flag as false).
local NO_LEGACY = { any = false }

-- The servers' legacy flags for token's lock, which the renewal thread
-- extends it by (renewer:add): per lock in mode "auto" (each server's flag
-- is the mode that took the lock there), else the same for every lock
-- (kept on the client). A flag: false (the script), true (legacy mode),
-- "expire" (legacy mode on a server without PEXPIRE, before 2.6: extended
-- with EXPIRE).
local function modes(client, token)
    local m = client.modes
    if m then return m end
    -- (auto, one server that never fell back to legacy mode: redlock.detect
    -- keeps no legacy_held for it, and it took every lock by script)
    local one = client.one
    if one and not one.legacy_held and one.ops.name ~= "legacy" then return NO_LEGACY end
    m = {}
    for i, server in ipairs(client.servers) do
        local caps = server.caps
        m[i] = legacy_lock(server, token) and (caps and caps.pexpire == false and "expire" or true)
        m.any = m.any or m[i] ~= false
    end
    if client.opts.mode ~= "auto" then client.modes = m end
    return m
end

-- The client's renewal thread, made at the first renewal.
local function renewer(client)
    local r = client.renewer
    if r then return r end
    local conns = {}
    for i, server in ipairs(client.servers) do conns[i] = server:renewal_conn() end
    -- Redlock: the thread asks the servers at once, each within the
    -- short per-server timeout (opts.server_timeout, else 50 ms)
    r = new_renewer(conns, #conns >= 2 and (client.opts.server_timeout or REDLOCK_TIMEOUT) or 0)
    client.renewer, client.renewing = r, setmetatable({}, WEAK_V)
    return r
end

-- A renewed lock keeps the servers auto mode found without scripting in
-- legacy mode while it is renewed (redlock.detect.renewing): the servers
-- counted when its renewal started, or nil.
local function renewing_legacy(lock)
    local counted
    for _, server in ipairs(lock.client.servers) do
        if detect.renewing(server, 1, lock.token, lock.ttl) then
            counted = counted or {}
            counted[#counted + 1] = server
        end
    end
    return counted
end

-- A group lock's renewal: one entry of the renewal thread per key (each
-- renewed by the extend script), seen as one handle: it expires with its
-- first key, is lost when one key is, and stops with all. Once one key is
-- found lost (at the client's next call that asks: dispatch, lock:lost(),
-- extend, release), the others stop being renewed: the group is lost, and
-- its other keys would keep others out for nobody.
local Group = {}
Group.__index = Group
function Group:expires()
    local e = self[1]:expires()
    for i = 2, #self do e = math.min(e, self[i]:expires()) end
    return e
end
function Group:lost()
    for i = 1, #self do
        local why = self[i]:lost()
        if why then
            self:stop()
            return why
        end
    end
end
function Group:state()
    local phase, a, renewals, failures, b, err = self[1]:state()
    for i = 2, #self do
        local _, _, r, f, _, e = self[i]:state()
        renewals, failures, err = math.min(renewals, r), math.max(failures, f), err or e
    end
    return phase, a, renewals, failures, b, err
end
function Group:stop() for i = 1, #self do self[i]:stop() end end
function Group:update(ttl, expires) for i = 1, #self do self[i]:update(ttl, expires) end end

local function start_renewal(lock, max_hold, t0)
    local hold_until = max_hold and t0 + max_hold or NO_BOUND
    local client = lock.client
    local m = modes(client, lock.token)
    -- (without a server in legacy mode for it, every server can renew it)
    if lock.ttl < 3 or (m.any and not renewable(client, lock.token)) then return end
    local r = renewer(client)
    local n = #client.servers
    -- a lock that waits for replicas (lock.rep) renews the same way
    local rep = lock.rep
    local h, id
    local keys = lock.keys
    if keys then
        h = setmetatable({}, Group)
        local ids = {}
        for i, key in ipairs(keys) do
            if rep then
                h[i], ids[i] = r:add(key, lock.token, lock.ttl, lock.expires, hold_until, floor(n / 2) + 1,
                    client.drift_factor, rep.replicas, rep.replica_timeout, rep.aof, m)
            else
                h[i], ids[i] = r:add(key, lock.token, lock.ttl, lock.expires, hold_until, floor(n / 2) + 1,
                    client.drift_factor, nil, nil, nil, m)
            end
            client.renewing[ids[i]] = lock
        end
        id, lock.renewal_ids = ids[1], ids
    elseif rep then
        h, id = r:add(lock.key, lock.token, lock.ttl, lock.expires, hold_until,
            floor(n / 2) + 1, client.drift_factor, rep.replicas, rep.replica_timeout, rep.aof, m)
    else
        h, id = r:add(lock.key, lock.token, lock.ttl, lock.expires, hold_until,
            floor(n / 2) + 1, client.drift_factor, nil, nil, nil, m)
    end
    lock.renewal, lock.renewal_id = h, id
    client.renewing[id] = lock
    lock.legacy_renewal = m.any and renewing_legacy(lock) or false
    if lock.on_event then
        -- its renewals are told at the client's calls (see dispatch)
        lock.seen_renewals, lock.seen_failures = 0, 0
        client.polls = true
    end
end

--- A lock was just taken (t0: before the request). Records its re-entrant
-- hold and starts its renewal. If the renewal thread cannot start, the lock
-- is released and the error raised again.
function _M.taken(lock, o, renew, t0)
    lock.on_lost = o.on_lost
    if o.reentrant then
        local client, owner = lock.client, o.owner
        if owner == nil then owner = client end
        local holds = client.holds
        if not holds then
            holds = {}
            client.holds = holds
        end
        local by_owner = holds[lock.key]
        if by_owner == nil then
            by_owner = setmetatable({}, WEAK_KV)
            holds[lock.key] = by_owner
        end
        by_owner[owner] = lock
        lock.owner = owner
    end
    if renew then
        local ok, err = pcall(start_renewal, lock, o.max_hold, t0)
        if not ok then
            lock:release()
            error(err, 0)
        end
    end
    return lock
end

--- The validity end of lock as this client knows it (ms, monotonic).
function _M.expires(lock)
    local h = lock.renewal
    if h then return h:expires() end
    return lock.expires
end

--- The whole ms of lock's validity left at t (default now): what
-- remaining() answers; 0 is "run out", for every check of it.
function _M.left(lock, t)
    return math.max(0, math.floor(_M.expires(lock) - (t or now())))
end

--- Why lock is lost, or nil: the renewal (or extend/release) found the token
-- gone ("gone"), the validity ran out before a renewal ("expired"), or the
-- renewal stopped at max_hold and the validity then ran out ("max_hold").
function _M.lost(lock)
    if lock.lost_reason then return lock.lost_reason end
    if lock.released then return nil end
    local h = lock.renewal
    local why = h and h:lost()
    if why then return why end
    if _M.left(lock) == 0 then
        local phase = h and h:state()
        return phase == "holding" and "max_hold" or "expired"
    end
    return nil
end

--- lock:lost()'s answer, and the loss reported (on_lost, the lost event)
-- the first time it is known: the clock can tell before the renewal
-- thread has woken to mark it.
function _M.learn_lost(lock)
    local why = _M.lost(lock)
    if why then report(lock, why) end
    return why
end

--- The renewal's own finding only (what release and with_lock trust: a
-- lock without renewal is judged by the server's answer alone).
function _M.renewal_lost(lock)
    if lock.lost_reason then return lock.lost_reason end
    local h = lock.renewal
    return h and h:lost()
end

-- The renewal of lock stops (for good: h:stop() is idempotent, this runs once).
local function stopped(lock)
    local counted = lock.legacy_renewal
    if counted then
        lock.legacy_renewal = nil
        for _, server in ipairs(counted) do detect.renewing(server, -1, lock.token, lock.ttl) end
    end
end

--- extend or release found the token gone: stop renewing, tell on_lost.
-- why: "gone" by default; "expired" from nginx's timer renewal
-- (redlock.cosocket.renew), whose validity ran out before a renewal.
function _M.found_gone(lock, why)
    lock.lost_reason = lock.lost_reason or why or "gone"
    if lock.renewal then
        lock.renewal:stop()
        stopped(lock)
    end
    report(lock, lock.lost_reason)
end

--- An extend of lock is on its way with a ttl that ends sooner than its
-- validity: the validity ends at expires (ms, monotonic) from now on.
function _M.shorten(lock, expires)
    lock.expires = expires
    _M.extended(lock)
end

--- A Lua-side extend succeeded (or shortened lock's validity): the
-- renewal continues from lock.ttl and lock.expires.
function _M.extended(lock)
    local h = lock.renewal
    if h then h:update(lock.ttl, lock.expires) end
end

--- Before the release request: stop renewing, so that a renewal in flight
-- that finds the key deleted does not report a loss.
function _M.stop(lock)
    local h = lock.renewal
    if h then
        if lock.on_event then poll(lock) end
        h:stop()
        stopped(lock)
        -- (a loop of with_lock must not grow the table until a collection)
        lock.client.renewing[lock.renewal_id] = nil
        local ids = lock.renewal_ids
        if ids then
            for _, id in ipairs(ids) do lock.client.renewing[id] = nil end
        end
    end
end

--- The lock is released (or known lost at its release): forget its hold.
function _M.forget(lock)
    local owner = lock.owner
    if owner == nil then return end
    local holds = lock.client.holds
    local by_owner = holds and holds[lock.key]
    if by_owner and by_owner[owner] == lock then
        by_owner[owner] = nil
        if next(by_owner) == nil then holds[lock.key] = nil end
    end
end

--- Re-entry: the lock `owner` (opts.owner, default the client) already
-- holds on key, with one more hold counted; nil when it holds none (or
-- holds one that is lost: then a fresh acquire follows); nil, err, code when
-- topping up the validity failed on the way.
function _M.reenter(client, key, o, renew)
    local holds = client.holds
    local owner = o.owner
    if owner == nil then owner = client end
    local by_owner = holds and holds[key]
    local lock = by_owner and by_owner[owner]
    if not lock then return nil end
    if lock.released or _M.lost(lock) then
        _M.forget(lock)
        return nil
    end
    -- the new hold gets at least the validity its ttl asks for
    if not lock.renewal and _M.expires(lock) - now() < o.ttl * (1 - client.drift_factor) - 2 then
        local ok, err, code = lock:extend(o.ttl)
        if not ok then
            if code == "not owner" then
                _M.forget(lock)
                return nil
            end
            return nil, err, code
        end
    end
    if renew and not lock.renewal then
        local ok, err = pcall(start_renewal, lock, o.max_hold, now())
        if not ok then error(err, 0) end
    end
    lock.holds = lock.holds + 1
    return lock
end

--- Stops the renewal thread (joined) and its connections.
function _M.close(client)
    local r = client.renewer
    if r then r:close() end
end

return _M
