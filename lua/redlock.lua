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
local engine = require "redlock.acquire"
local cosocket = require "redlock.nginx.cosocket"
local options = require "redlock.options"
local addresses = require "redlock.addresses"
local hold = require "redlock.hold"
local server_mod = require "redlock.server"
local single = require "redlock.single"
local quorum = require "redlock.quorum"
local scripted = require "redlock.scripted"
local util = require "redlock.util"
local ops_for = require("redlock.detect").ops_for
local events = require "redlock.events"
local group = require "redlock.group"
local notify = require "redlock.notify"

local now, new_token = core.now, core.token
local show_key = util.show_key
local setmetatable, type, error, pcall, ipairs = setmetatable, type, error, pcall, ipairs
local format = string.format
local dispatch = hold.dispatch
local emit = events.emit

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
local Lock = engine.Lock
local call_opts, kind_opts, acquire = engine.call_opts, engine.kind_opts, engine.acquire

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
    local o = engine.derive(options.check("new", opts, options.DEFAULTS, options.CALL, options.CLIENT))
    local specs = addresses.parse(opts.servers, o.tls)
    -- Inside nginx: cosockets where the phase allows, else hiredis
    -- (redlock.nginx.cosocket decides per call); elsewhere hiredis' sockets.
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
local release, lock_ended, not_owner

local function callable(f)
    if type(f) == "function" then return true end
    local mt = type(f) == "table" and getmetatable(f)
    return mt and mt.__call ~= nil
end

-- The end of with_lock, with fn's pcall results passed on as values (no
-- table per call): on_lost runs before the release; fn's error, else
-- on_lost's, is raised again after it. A release that failed otherwise than
-- "not owner" after fn returned, the lock not known lost: false, err, code,
-- fn's results (fn ran under the lock; the key may stay held until its ttl).
local function finish(client, lock, ok, ...)
    local t, told, terr = now(), true, nil
    local renewer = client.renewer
    if renewer and (client.polls or renewer:pending()) then told, terr = pcall(dispatch, client) end
    -- (Lock:release without its dispatch, just made)
    local released, rerr, rcode = lock_ended(lock, "released", release(lock, true))
    if not ok then error((...), 0) end
    if not told then error(terr, 0) end
    if released then return true, ... end
    if rcode == "not owner" then return nil, rerr, rcode end
    -- (known lost, by the renewal or its validity, when fn returned)
    local lost = hold.renewal_lost(lock) or hold.left(lock, t) == 0 and "its validity ran out while fn ran"
    if lost then
        return not_owner(lock, "this client", format("%s; the release failed too: %s", lost, rerr))
    end
    return false, format("%s; fn ran and returned (its results follow), and the lock may stay held until its"
        .. " ttl runs out", rerr), rcode, ...
end

--- Runs `fn(lock)` while holding the lock on `key`, then releases it.
-- The lock is renewed in the background while fn runs (opts.renew, default
-- true here), while it runs (or up to opts.max_hold, when given).
-- Returns true and every result of fn; nil, message, code when the lock
-- could not be taken (fn is not called) or was lost before the release
-- ("not owner"); false, message, code and every result of fn when fn
-- returned but the release failed otherwise (connection, no quorum,
-- server, closed: the lock may stay held until its ttl runs out). If fn
-- raises, the lock is released and the same error value is raised again
-- (as is an error raised by opts.on_lost).
-- @tparam string key
-- @tparam[opt] table opts as for acquire
-- @tparam function fn called as fn(lock)
-- @return true, fn's results; or nil, message, code; or false, message,
--   code, fn's results
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
    return hold.left(self)
end

--- Whether this lock is known lost, answered from memory (no I/O).
-- @treturn boolean true, reason ("gone": a renewal, extend or release found
--   the token gone; "expired": the validity ran out before a renewal;
--   "max_hold": renewal stopped at max_hold and the validity ran out),
--   or false (held as far as this client knows, or released by it)
function Lock:lost()
    dispatch(self.client)
    local why = hold.learn_lost(self)
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

function not_owner(lock, where, how)
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
    -- the server may take the new ttl from now on, whatever answer comes
    -- back (or none): a shorter one ends the validity sooner from here
    local sooner = expiry(client, t0, ttl)
    if sooner < hold.expires(self) then hold.shorten(self, sooner) end
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
        -- write gave, or this one's if sooner (the master may hold the key
        -- longer)
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
        ok, where, code = scripted.release(server, key, self.token, not self.fair and notify.BARGE_MS or nil)
        if not ok then ok, where, code = single.released(server, ok, where, code) end
    else
        local strategy, bound = self.strategy or client.strategy, not self.fair and notify.BARGE_MS or nil
        if strategy.name == "quorum" then
            -- (Redlock tries failed servers again within the validity)
            ok, where, code = strategy.release(client, key, self.token, hold.expires(self), self.on_event,
                bound)
        else
            ok, where, code = strategy.release(client, key, self.token, bound)
        end
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
