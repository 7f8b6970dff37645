--- The nginx transport. Inside ngx_lua, in the phases that may yield
-- (rewrite, access, content, timers, ...), a server speaks to Redis over
-- nginx cosockets (ngx.socket.tcp, pooled with keepalive) and waits with
-- ngx.sleep, so a lock never stalls the worker's event loop. The C core still
-- does the protocol: core.encode builds the commands, core.reader parses the
-- replies, core.scripts names the scripts for EVALSHA. In the other phases
-- (init, init_worker, set, header/body filters, log, balancer) nginx gives
-- no cosockets, and the same server uses hiredis' blocking socket instead.
--
-- The interface is redlock.server's (new, sleep, and a Server with call,
-- eval, acquire, release, extend, close, name); the Server methods this file
-- does not define come from redlock.server. Internal.
local core = require "redlock.core"
local blocking = require "redlock.server"
local ngx_wait = require "redlock.nginx.wait"
local ngx_conn = require "redlock.nginx.conn"
local hold = require "redlock.hold"

local ngx = rawget(_G, "ngx") -- nil outside nginx
local encode, scripts, core_sleep = core.encode, core.scripts, core.sleep
local core_fanout_eval, core_fanout_eval_wait = core.fanout_eval, core.fanout_eval_wait
local now, grant_fence, grant_fence_command = core.now, core.grant_fence, core.grant_fence_command
local wait_command, core_command_slot, keyslot = core.wait_command, core.command_slot, core.keyslot
local DEFAULTS = core.defaults -- csrc/defaults.h
local setmetatable, select, type, error, tostring, pcall =
    setmetatable, select, type, error, tostring, pcall
local format = string.format
local floor, max, min = math.floor, math.max, math.min
local running, status = coroutine.running, coroutine.status
local WEAK_V, WEAK_K = { __mode = "v" }, { __mode = "k" }
local unpack = table.unpack or unpack -- luacheck: ignore 143

local _M = {}

-- Phases in which ngx.socket.tcp and ngx.sleep work (lua-nginx-module's
-- documented contexts); any other phase takes the blocking path. Not
-- ssl_client_hello nor ssl_session_fetch: a yield there needs OpenResty's
-- own patches to nginx and OpenSSL, and elsewhere (Debian's nginx) it ends
-- the handshake or is refused.
local YIELDABLE = {
    rewrite = true, server_rewrite = true, access = true, content = true, timer = true,
    ssl_cert = true, preread = true,
}

--- Whether this Lua state lives inside nginx's Lua module (any phase).
function _M.in_nginx()
    return type(ngx) == "table" and type(ngx.get_phase) == "function"
        and type(ngx.socket) == "table" and type(ngx.socket.tcp) == "function"
end

local function yieldable()
    return YIELDABLE[ngx.get_phase()] == true
end
_M.yieldable = yieldable

--- Sleeps `ms` milliseconds: ngx.sleep where the phase may yield (the worker
-- serves other requests meanwhile), else a blocking sleep.
function _M.sleep(ms)
    if ms <= 0 then return end
    if yieldable() then return ngx.sleep(ms / 1000) end
    return core_sleep(ms)
end

local Server = setmetatable({}, { __index = blocking.Server })
Server.__index = Server
_M.Server = Server

-- the connection layer (redlock.nginx.conn)
local fallback, command_name = ngx_conn.fallback, ngx_conn.command_name
local request, kind_of = ngx_conn.request, ngx_conn.kind_of
local NEW_CONN, made_in_worker, let_go = ngx_conn.NEW_CONN, ngx_conn.made_in_worker, ngx_conn.let_go

local function closed()
    return nil, "closed: the connection is closed", "closed"
end

-- The slot a command or a script goes by where the kind routes by key
-- (a Cluster), else -1 (the core's rule: core.command_slot).
local function command_slot(self, ...)
    if not self.kind.routed then return -1 end
    return core_command_slot(...)
end
local function script_slot(self, nkeys, key)
    if not self.kind.routed or nkeys < 1 or key == nil then return -1 end
    return keyslot(tostring(key))
end

-- One command: reply, or nil, message, code, retry. kept: a step of a
-- WATCH..EXEC, never sent again.
local function command(self, kept, ...)
    if self.closed then return closed() end
    if not yieldable() then
        local conn = fallback(self).conn
        if kept then return conn:command_kept(...) end
        return conn:command(...)
    end
    local req = encode(...) -- raises on bad arguments, before any I/O
    return request(self, command_slot(self, ...), kept and "k" or "", command_name((...)), req)
end

local function check_script(name, nkeys, n)
    local script = type(name) == "string" and scripts[name]
    if not script then error("bad argument #1 to 'eval' (unknown script)", 3) end
    if type(nkeys) ~= "number" or nkeys < 0 or nkeys > n then
        error("bad argument #2 to 'eval' (numkeys out of range)", 3)
    end
    return script
end

-- One script run: reply, or nil, message, code.
local function eval(self, script, name, nkeys, ...)
    if self.closed then return closed() end
    if not yieldable() then return fallback(self).conn:eval(name, nkeys, ...) end
    local req = encode("EVALSHA", script.sha, nkeys, ...)
    return request(self, script_slot(self, nkeys, (...)), "s", nil, req, nil, nil, script, nkeys, ...)
end

-- The encoded WAIT (or WAITAOF) of replica acknowledgement (the core's).
local function wait_request(replicas, ms, aof)
    local req, extra = wait_command(replicas, ms, aof)
    return { req = req, ms = extra, aof = aof,
        what = aof and "waiting for WAITAOF's reply" or "waiting for WAIT's reply" }
end

-- What other modules reach as server.conn (legacy mode sends the commands
-- of a WATCH..EXEC sequence there, without Server:call's retry): a
-- core.conn's interface, routed per phase like the server's own calls.
local Conn = {}
Conn.__index = Conn

function Conn:command(...) return command(self.server, false, ...) end
-- core.conn's command_kept (legacy mode's steps after a sequence's
-- first): in a sequence (Server:sequence) only on the connection its
-- commands kept; with none (lost, or closed as the master became a
-- replica) it fails without sending, as the C conn does.
function Conn:command_kept(...)
    local server = self.server
    if server.kept and not server.closed and yieldable() and server.pinned[running()] == nil then
        return nil, format("connection: %s: the connection of this sequence was lost (not sent on a new one)",
            server.name), "connection"
    end
    return command(server, true, ...)
end

function Conn:eval(name, nkeys, ...)
    return eval(self.server, check_script(name, nkeys, select("#", ...)), name, nkeys, ...)
end

-- core.conn's eval_values: an answer of 1 to 4 integers as that many values
local function spread(r, ...)
    if type(r) ~= "table" then return r, ... end
    local n = #r
    if n < 1 or n > 4 then return r end
    for i = 1, n do
        if type(r[i]) ~= "number" then return r end
    end
    return unpack(r, 1, n)
end

function Conn:eval_values(name, nkeys, ...)
    return spread(self:eval(name, nkeys, ...))
end

-- core.conn's eval_wait (see csrc/drivers/conn.c): the script and WAIT in one
-- write. acked, fsynced, values... | false, message, values... | nil,
-- message, code, stale.
local function waited(v, wres, ...)
    if v == nil then return v, wres, ... end
    if type(wres) == "table" then return wres[1], wres[2], spread(v) end
    return false, wres, spread(v)
end

function Conn:eval_wait(name, replicas, ms, aof, nkeys, ...)
    local server = self.server
    local script = check_script(name, nkeys, select("#", ...))
    if server.closed then return closed() end
    if not yieldable() then return fallback(server).conn:eval_wait(name, replicas, ms, aof, nkeys, ...) end
    local req = encode("EVALSHA", script.sha, nkeys, ...)
    return waited(request(server, script_slot(server, nkeys, (...)), "s", nil, req, nil,
        wait_request(replicas, ms, aof), script, nkeys, ...))
end

-- The grant's XADD (see Conn:grant; its words are the C core's, the one
-- definition: core.grant_fence_command), per counter key: sent after the SET,
-- in its write, and its reply handed back as it is; and, fenced or not,
-- only on a pooled connection (redlock.nginx.conn's request)
local xadds = {}
local function xadd_request(counter)
    local w = xadds[counter]
    if not w then
        w = { req = encode(unpack(grant_fence_command(counter))), ms = 0, reply = true, pooled = true }
        xadds[counter] = w
    end
    return w
end
local POOLED = { ms = 0, pooled = true }

--- core.conn's grant (csrc/connection/conn_lua.c; redlock.scripted.grant uses it):
-- the uncontended acquire without a script, SET key token NX PX ttl and,
-- with a counter, the fence's XADD, in one write on one pooled connection,
-- with the same answers; what XADD's reply means is the C core's rule
-- (core.grant_fence), the one conn:grant reads it by. on: the connects()
-- count (Conn.connects: the worker's) a script ran at; -3 (nothing sent)
-- when a pooled connection was made since, by any client of the worker,
-- or when none is pooled now (a new one, which no script ran on, is made
-- and pooled for the next caller): it may reach a server that refuses
-- scripting now, and with it this lock's release.
function Conn:grant(key, token, ttl, counter, on)
    local server = self.server
    if server.kind.routed then error("bad argument #1 to 'grant' (not for a Cluster)", 2) end
    if server.closed then return closed() end
    if on ~= nil and on ~= made_in_worker() then return -3 end
    if not yieldable() then
        local conn = fallback(server).conn
        return conn:grant(key, token, ttl, counter, on and conn:connects())
    end
    local req = encode("SET", key, token, "NX", "PX", ttl)
    local w = counter and xadd_request(counter) or POOLED
    -- (its caller sends it again, as the script, where the answer allows)
    local v, id, err, retry = request(server, -1, "c", nil, req, nil, w)
    if v == nil then
        if err == NEW_CONN then return -3 end
        return nil, id, err, retry
    end
    -- (a held key: XADD ran all the same)
    if v ~= "OK" then return 0 end
    if not counter then return 1, 0 end
    return 1, grant_fence(server.name, id, err)
end

--- For the acquire without a script (redlock.scripted: server.grants):
-- the pooled connections this worker has made, to any server (a new one
-- may reach a server that refuses scripting now).
function Conn.connects() return made_in_worker() end

--- Whether a connection is open for this caller now: in cosocket phases,
-- one held since WATCH or MULTI (the state a caller may need to clean up).
function Conn:connected()
    local server = self.server
    if not yieldable() then return fallback(server).conn:connected() end
    return server.pinned[running()] ~= nil
end

function Conn:name() return self.server.name end
function Conn:close() return self.server:close() end

local function sequence_ended(v, co, ok, ...)
    let_go(v, co)
    if not ok then error((...), 0) end
    return ...
end

--- Runs f(server, ...) as one sequence of commands on one connection
-- (redlock.legacy's operations), as the C conn does, which has one: in
-- the cosocket phases f gets a view of this server whose commands all go
-- on the connection the first one took (Server:call takes another only
-- when that one was lost; command_kept never does), which goes back to the
-- pool when f returns. Elsewhere, and for a view, f(self, ...).
function Server:sequence(f, ...)
    if self.kept or not yieldable() then return f(self, ...) end
    -- (its own fields in the table; any other it writes is the server's)
    local v = setmetatable({ kept = true, tx_open = false, pinned = setmetatable({}, WEAK_K), conn = false },
        { __index = self, __newindex = self })
    v.conn = setmetatable({ server = v }, Conn)
    return sequence_ended(v, running(), pcall(f, v, ...))
end

--- Makes a server. spec: a checked server table; mode: "auto", "script" or
-- "legacy"; o: the client's options (connect_timeout, timeout,
-- keepalive_timeout, pool_size).
function _M.new(spec, mode, o)
    o = o or {}
    local b = blocking.new(spec, mode)
    local host = spec.host
    if host and host:find(":", 1, true) then host = "[" .. host .. "]" end
    local self = setmetatable({
        transport = "cosocket",
        spec = spec,
        name = b.name,
        mode = mode,
        ops = b.ops, -- as redlock.server picks them for the mode
        scripts_only = b.scripts_only,
        fallback = b,
        fallback_pid = ngx.worker.pid(),
        host = host,
        port = spec.port or 6379,
        path = spec.path and ("unix:" .. spec.path),
        connect_timeout = spec.connect_timeout or o.connect_timeout or DEFAULTS.connect_timeout,
        -- 0 is "no timeout" for hiredis; cosockets want a number of ms
        timeout = (spec.timeout == 0 and 86400000) or spec.timeout or o.timeout or DEFAULTS.timeout,
        keepalive_timeout = o.keepalive_timeout or DEFAULTS.keepalive_timeout,
        pool_size = o.pool_size or DEFAULTS.pool_size,
        readers = {},
        -- its kind (redlock.nginx.conn: plain, Sentinel, Cluster), whose init
        -- sets its topology (csrc/topology/topo.h) and state
        kind = kind_of(spec),
        -- coroutine -> socket held between WATCH/MULTI and EXEC; weak, so a
        -- finished request's coroutine does not keep anything alive
        pinned = setmetatable({}, { __mode = "k" }),
        -- connections made with setup() (see Server:connects)
        made = 0,
        -- each request's last refusal's server ms (redlock.notify.refused_at)
        refused_by = setmetatable({}, { __mode = "k" }),
        closed = false,
    }, Server)
    self.kind.init(self, spec, o)
    self.conn = setmetatable({ server = self }, Conn)
    -- the state of its locks, as redlock.server's (the uncontended acquire
    -- without a script too, Conn:grant)
    blocking.lock_state(self, spec)
    return self
end

--- A connection of its own, for a subscriber (redlock.nginx.conn.open).
_M.open = ngx_conn.open


--- Waiting for a release: a blocking BLPOP per waiter has no place in an
-- nginx worker; one subscriber per worker hands its waiters the lock, or
-- wakes them (redlock.nginx.wait). nil: the caller sleeps (polls) this time.
-- since: when the attempt that failed was sent (core.now()); token: the
-- waiter's, when a release may hand it the lock or a permit ("p", see
-- handoff_how): then "handed", fence, since when it did. give_back(server,
-- key, token): a kind's release (a permit's, a reader's), for a hand-off
-- to a waiter whose request has ended; nil: a single lock's.
function Server:wait(key, ms, since, token, _, give_back)
    -- (legacy mode's releases publish nothing: its waiters poll)
    if not self.ops.wait or not yieldable() then return nil end
    return ngx_wait.wait(self, key, ms, since, token, give_back)
end

--- A waiter whose GIVE_UP found the lock handed to it (redlock.scripted.
-- give_up): the hand-off's message, "handed", fence, since; or nil.
function Server:handed_late(key, token, give_back)
    if not yieldable() then return nil end
    return ngx_wait.handed_late(self, key, token, give_back)
end

--- How a waiter (token) of key joins the queue (redlock.scripted.how;
-- scripts/acquire.lua and the kinds'), a single lock's, a permit's or a
-- reader's: "p", handed it by a message to its worker's subscriber, when
-- that subscriber listens and this phase can wait for it (the subscriber
-- then follows it until dequeued: redlock.nginx.wait's join; give_back and
-- alive as there); else "w", woken only (it polls meanwhile).
function Server:handoff_how(key, token, give_back, alive)
    if ngx_wait.can_wait() and ngx_wait.listening(self) then
        ngx_wait.join(self, key, token, give_back, alive)
        return "p"
    end
    return "w"
end

--- The acquire of token's waiter has ended (redlock.lua), whatever it came
-- to: its worker's subscriber no longer follows it (redlock.nginx.wait).
function Server:dequeued(token) return ngx_wait.done(self, token) end

--- How many connections to this server this worker has made (pooled
-- ones and the hiredis ones of the phases without cosockets): a new one may
-- reach a server with other settings (redlock.detect asks again).
function Server:connects() return self.made + fallback(self).conn:connects() end

--- The renewal thread (csrc/drivers/renew.c) runs outside the event loop with
-- blocking connections of its own: it copies the hiredis server's settings.
function Server:renewal_conn() return self.fallback.conn end

--- Runs a command; nil, message, code on failure. A pooled connection that
-- the server closed is not a failure of this call: the request loop sends
-- once more on a new connection.
function Server:call(...)
    local r, err, code = command(self, false, ...)
    return r, err, code
end

--- Runs a named script of the core (EVALSHA, EVAL on NOSCRIPT).
function Server:eval(name, nkeys, ...)
    local script = check_script(name, nkeys, select("#", ...))
    local r, err, code = eval(self, script, name, nkeys, ...)
    return r, err, code
end

-- One server's part of a fan-out, in its own light thread (as csrc/drivers/fanout.c:
-- the same request loop as any command, within the fan-out's time limit).
local function fan_one(server, tmo, w, script, nkeys, ...)
    if server.closed then return closed() end
    local req = encode("EVALSHA", script.sha, nkeys, ...)
    return request(server, script_slot(server, nkeys, (...)), "s", nil, req, tmo, w, script, nkeys, ...)
end

-- The light threads of a fan-out (see fanout_eval); w: WAIT with the
-- script (fanout_eval_wait), then acks and fsyncs are returned too.
local function fanout_run(conns, timeout, w, script, nkeys, ...)
    local n = #conns
    local threads, vals, errs, codes, flags = {}, {}, {}, {}, {}
    local acks, fsyncs = {}, {}
    for i = 1, n do
        threads[i] = ngx.thread.spawn(fan_one, conns[i].server, timeout, w, script, nkeys, ...)
    end
    for i = 1, n do
        local ok, v, err, code, _, timed_out = ngx.thread.wait(threads[i])
        if not ok then -- the thread raised: v is the error
            errs[i], codes[i] = format("connection: %s: %s", conns[i].server.name, tostring(v)), "connection"
        elseif v ~= nil then
            vals[i] = v
            if w then
                if type(err) == "table" then
                    acks[i], fsyncs[i] = err[1], err[2]
                else
                    acks[i] = err
                end
            end
        else
            errs[i], codes[i] = err, code
            flags[i] = timed_out and "timeout" or nil
        end
    end
    if w then return vals, errs, codes, flags, acks, fsyncs end
    return vals, errs, codes, flags
end

--- Redlock's fan-out (core.fanout_eval's contract, see csrc/drivers/fanout.c) for
-- servers of this transport: conns are their server.conn. Where the phase
-- may yield, one light thread per server (ngx.thread.spawn), so the call
-- costs the slowest answer, each limited to timeout ms (twice that on a
-- new connection); elsewhere core.fanout_eval over their blocking
-- connections. Returns values, errs, codes, flags ("timeout").
function _M.fanout_eval(conns, timeout, name, nkeys, ...)
    local n = #conns
    local script = check_script(name, nkeys, select("#", ...))
    if not yieldable() then
        local blocking_conns = {}
        for i = 1, n do blocking_conns[i] = fallback(conns[i].server).conn end
        return core_fanout_eval(blocking_conns, timeout, name, nkeys, ...)
    end
    return fanout_run(conns, timeout, nil, script, nkeys, ...)
end

--- core.fanout_eval_wait's contract (csrc/drivers/fanout.c) for this transport:
-- fanout_eval with WAIT (or WAITAOF) after the script on each server.
function _M.fanout_eval_wait(conns, timeout, replicas, ms, aof, name, nkeys, ...)
    local n = #conns
    local script = check_script(name, nkeys, select("#", ...))
    if not yieldable() then
        local blocking_conns = {}
        for i = 1, n do blocking_conns[i] = fallback(conns[i].server).conn end
        return core_fanout_eval_wait(blocking_conns, timeout, replicas, ms, aof, name, nkeys, ...)
    end
    return fanout_run(conns, timeout, wait_request(replicas, ms, aof), script, nkeys, ...)
end

--- Renews `lock` from nginx timers: a token-checked extend every `every`
-- ms (default a third of the lock's ttl), while its holder holds it: until
-- the lock is released or lost, or its holder is gone, or, when
-- opts.max_hold is given, max_hold ms have passed since renewal began
-- (then the lock expires on its own). The holder is the coroutine that
-- called renew (a request's handler, a light thread, a timer): renewal
-- stops at the first tick after it returned or raised, and, since
-- ngx.exit, a client abort or a killed light thread leave it suspended for
-- good rather than dead, once it is collected (it is held weakly).
-- opts.detached = true unties it (renewal then also outlives the request:
-- the caller releases the lock elsewhere, e.g. in log_by_lua, or sets
-- max_hold). Timers may always yield, so the
-- extends go over cosockets, each on a pooled connection of its own, even
-- for a lock taken where nginx had none. A chain of ngx.timer.at rather
-- than ngx.timer.every, which cannot be stopped: each renewal ends with its
-- lock, and holds one pending timer meanwhile (lua_max_pending_timers).
-- A failed extend that is not "not owner" (Redis slow or away; with
-- Redlock, a majority not reached) is tried again at the next tick while
-- the lock is still valid; once its validity has run out before a renewal
-- (lock:lost() says "expired", the renewal thread's rule), it is lost:
-- renewal stops, on_lost runs, the lock's own on_lost too.
-- @tparam table lock a redlock lock
-- @tparam[opt] table opts every, max_hold (ms), on_lost(lock) (called in the
--   timer when an extend finds the lock gone), detached
-- @treturn table|nil a handle (stop(), and fields active, lost, err), or
--   nil, message when nginx refused the timer
function _M.renew(lock, opts)
    opts = opts or {}
    local every = opts.every or max(1, floor(lock.ttl / 3))
    local deadline = opts.max_hold and now() + opts.max_hold or math.huge
    local handle = { active = true }
    function handle.stop() handle.active = false end
    -- the holder, weakly (a coroutine outside any, the main one, is none)
    local co, main = running()
    local holder = not opts.detached and co and not main and setmetatable({ co }, WEAK_V)
    local function gone()
        if not holder then return false end
        local c = holder[1]
        return c == nil or status(c) == "dead"
    end
    local tick
    local function again(ms)
        local ok, err = ngx.timer.at((ms or every) / 1000, tick)
        if not ok then
            handle.active, handle.err = false, "renewal: could not start a timer: " .. tostring(err)
        end
        return ok, err
    end
    local failed -- the last extend's error, since the last renewal
    local function lost(err)
        handle.active = false
        handle.lost, handle.err = true, err
        if opts.on_lost then pcall(opts.on_lost, lock) end
    end
    tick = function(premature)
        if premature or not handle.active or lock.released or now() >= deadline then
            handle.active = false
            return
        end
        if gone() then
            -- (the key expires on its own, ttl after the last renewal)
            handle.active, handle.err = false, "renewal: its holder ended without releasing the lock"
            return
        end
        local is_lost, why = lock:lost()
        if is_lost then
            -- the validity ran out before a renewal: no extend may revive it
            hold.found_gone(lock, why)
            return lost(format("renewal: lost (%s): no renewal within the lock's validity%s", why,
                failed and ("; the last attempt: " .. failed) or ""))
        end
        -- a kind that checks its address (Sentinel) does so at least twice
        -- per interval, as the renewal thread does (csrc/drivers/renew_io.c):
        -- a round that extends only an old master lets the copy on the new
        -- one run out
        for _, server in ipairs(lock.client.servers) do
            local recheck = server.kind and server.kind.recheck
            if recheck then recheck(server, every / 2) end
        end
        local ok, err, code = lock:extend()
        if not ok and (code == "not owner" or code == "closed") then
            handle.active = false
            -- a release that ran while this extend waited is no loss
            if code == "not owner" and not lock.released then lost(err) end
            return
        end
        if ok then
            failed = nil
            return again()
        end
        -- tried again at the next tick, or when the validity ends (then lost)
        handle.err, failed = err, err
        again(max(1, min(every, lock:remaining())))
    end
    local ok, err = again()
    if not ok then return nil, handle.err or tostring(err) end
    return handle
end

--- Closes the blocking connection; pooled cosockets are nginx's and close
-- when idle for keepalive_timeout.
function Server:close()
    self.closed = true
    if self.fallback then self.fallback:close() end
end

--- The server as its owed work sees it (redlock.nginx.wait's give-back of a
-- lock handed to a request that has ended): a request's cleanup may have
-- closed its client, yet the queue's other waiters are owed that lock now,
-- not after its ttl. A closed one's view shares its state and pool (nginx
-- still keeps the pooled connections) and answers as an open one.
function Server:owing()
    if not self.closed then return self end
    local v = setmetatable({ closed = false }, { __index = self })
    v.conn = setmetatable({ server = v }, Conn)
    return v
end

return _M
