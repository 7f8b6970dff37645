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
local ngx_wait = require "redlock.ngx_wait"
local ngx_sentinel = require "redlock.ngx_sentinel"
local ngx_cluster = require "redlock.ngx_cluster"

local ngx = rawget(_G, "ngx") -- nil outside nginx
local encode, new_reader, scripts, core_sleep = core.encode, core.reader, core.scripts, core.sleep
local core_fanout_eval, core_fanout_eval_wait = core.fanout_eval, core.fanout_eval_wait
local now = core.now
local setmetatable, select, type, error, tostring, ipairs, pcall =
    setmetatable, select, type, error, tostring, ipairs, pcall
local format, upper, sub, byte = string.format, string.upper, string.sub, string.byte
local floor, max = math.floor, math.max
local running, status = coroutine.running, coroutine.status
local WEAK_V = { __mode = "v" }
local unpack = table.unpack or unpack -- luacheck: ignore 143

local _M = {}

-- Phases in which ngx.socket.tcp and ngx.sleep work (lua-nginx-module's
-- documented contexts); any other phase takes the blocking path.
local YIELDABLE = {
    rewrite = true, server_rewrite = true, access = true, content = true, timer = true,
    ssl_cert = true, ssl_session_fetch = true, ssl_client_hello = true, preread = true,
}

-- Commands after which the connection carries state for the next command of
-- the same caller (WATCH ... EXEC, as legacy mode does): the socket stays
-- with the calling coroutine instead of going back to the pool, until a
-- command that ends that state.
local PIN = { WATCH = true, MULTI = true }
local UNPIN = { EXEC = true, DISCARD = true, UNWATCH = true }

local READ_SIZE = 16384
local MAX_READERS = 8

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

-- The hiredis server for the phases without cosockets. A socket opened in
-- init_by_lua (the master) would be shared by every forked worker, and
-- their replies would mix: each process makes its own.
local function fallback(self)
    local pid = ngx.worker.pid()
    local b = self.fallback
    if self.fallback_pid ~= pid then
        b = blocking.new(self.spec, self.mode)
        self.fallback, self.fallback_pid = b, pid
    end
    return b
end

-- Connections to one server go to a pool of their own, named by address,
-- database and credentials: a pooled connection has already run AUTH and
-- SELECT, so it must only be handed to a server with the same ones.
local function pool_name(self, host, port)
    local spec = self.spec
    local who = ""
    if spec.password then who = ngx.md5((spec.username or "") .. "\0" .. spec.password) end
    -- TLS connections never share a pool with plain ones, nor with other settings
    local tls = spec.tls
    if tls then
        who = who .. "/tls:" .. ngx.md5(format("%s\0%s\0%s\0%s\0%s", tls.server_name or "",
            tostring(tls.verify), tls.cert_file or "", tls.key_file or "", tls.ca_file or ""))
    end
    -- a Sentinel-managed server's pool is its master's of the moment; a
    -- Cluster's, one per node
    local where = (self.sentinel or self.cluster) and format("%s@%s:%d", self.name, host, port) or self.name
    return format("redlock:%s/%d/%s", where, spec.db or 0, who)
end

-- A client certificate for sock:setclientcert (lua-resty-core's ngx.ssl),
-- read once per worker and server. nil, message when it cannot be used.
local function client_cert(self, tls)
    if self.client_cert then return self.client_cert, self.client_key end
    local ok, ssl = pcall(require, "ngx.ssl")
    if not ok then return nil, "ngx.ssl (lua-resty-core) is needed for cert_file" end
    local function slurp(path)
        local f, err = io.open(path, "rb")
        if not f then return nil, err end
        local pem = f:read("*a")
        f:close()
        return pem
    end
    local cert_pem, err = slurp(tls.cert_file)
    if not cert_pem then return nil, "could not load cert_file (" .. tostring(err) .. ")" end
    local key_pem
    key_pem, err = slurp(tls.key_file)
    if not key_pem then return nil, "could not load key_file (" .. tostring(err) .. ")" end
    local cert, key
    cert, err = ssl.parse_pem_cert(cert_pem)
    if not cert then return nil, "could not load cert_file (" .. tostring(err) .. ")" end
    key, err = ssl.parse_pem_priv_key(key_pem)
    if not key then return nil, "could not load key_file (" .. tostring(err) .. ")" end
    self.client_cert, self.client_key = cert, key
    return cert, key
end

-- The TLS handshake on a new cosocket. The CAs are nginx's own
-- (lua_ssl_trusted_certificate): a cosocket takes no ca_file of its own.
local function handshake(self, sock, host)
    local tls = self.spec.tls
    if tls.cert_file then
        local cert, key = client_cert(self, tls)
        if not cert then return nil, format("connection: %s: TLS %s", self.name, key) end
        local ok, err = sock:setclientcert(cert, key)
        if not ok then
            return nil, format("connection: %s: TLS client certificate refused (%s)", self.name,
                tostring(err))
        end
    end
    local ok, err = sock:sslhandshake(false, tls.server_name or host or self.host, tls.verify ~= false)
    if not ok then
        return nil, format("connection: %s: TLS handshake failed (%s)", self.name, tostring(err))
    end
    -- Seen with Debian's ngx_lua 0.10.23, now and then: a failed
    -- verification logged and the socket closed, yet sslhandshake answers
    -- true. Never go on without a live, verified session.
    if not sock:getreusedtimes() then
        return nil, format("connection: %s: TLS handshake failed (nginx closed the connection: "
            .. "see its error log)", self.name)
    end
    return true
end

local function reader(self)
    local readers = self.readers
    local n = #readers
    if n == 0 then return new_reader() end
    local r = readers[n]
    readers[n] = nil
    return r
end

local function keep_reader(self, r)
    local readers = self.readers
    if #readers < MAX_READERS then readers[#readers + 1] = r end
end

-- Reads the next reply: true, reply values (a server error is nil,
-- message, "server"); or nil, error text of the socket.
local function next_reply(sock, rd)
    local err
    while true do
        local v, msg, code = rd:get()
        if v ~= false then return true, v, msg, code end
        local data
        data, err = sock:receiveany(READ_SIZE)
        if not data then return nil, err end
        rd:feed(data)
    end
end

-- Sends one request and reads one reply (as next_reply).
local function exchange(sock, rd, req)
    local sent, err = sock:send(req)
    if not sent then return nil, err end
    return next_reply(sock, rd)
end

-- WAIT's answer (replica acknowledgement, redlock.replicas) as the C
-- core's conn:eval_wait gives it: acked, fsynced (-1: WAIT); or nil.
local function wait_counts(v)
    if type(v) == "number" then return v, -1 end
    if type(v) == "table" and type(v[1]) == "number" and type(v[2]) == "number" then
        return v[2], v[1]
    end
    return nil
end

-- fresh: nothing was read yet on this new connection. A TLS port resets a
-- plain client that speaks RESP to it: say so (csrc/tls.c's
-- redlock_tls_plain_hint, the counterpart of the handshake's message).
local function io_failure(self, err, doing, limit, fresh)
    if err == "timeout" then
        return format("connection: %s: timed out after %d ms %s", self.name, limit, doing)
    end
    local hint = fresh and not self.spec.tls and not self.path and "; the server may want TLS (rediss://)"
        or ""
    return format("connection: %s: lost the connection %s (%s%s)", self.name, doing, tostring(err), hint)
end

-- Runs AUTH and SELECT on a connection that is new (not from the pool).
-- Returns true, or nil, message, code.
local function setup(self, sock, rd, limit)
    local spec = self.spec
    local steps = {}
    if spec.password then
        steps[1] = { "AUTH", spec.username and encode("AUTH", spec.username, spec.password)
            or encode("AUTH", spec.password) }
    end
    if spec.db and spec.db ~= 0 then
        steps[#steps + 1] = { "SELECT", encode("SELECT", spec.db) }
    end
    -- Sentinel: a new connection checks that the master it was told of is
    -- one (a failover may be under way); if not, the next try asks again
    if self.sentinel then steps[#steps + 1] = { "ROLE", encode("ROLE") } end
    for i, step in ipairs(steps) do
        local ok, v, msg, code = exchange(sock, rd, step[2])
        if not ok then return nil, io_failure(self, v, step[1], limit, i == 1), "connection" end
        if v == nil then
            if code == "server" then
                msg = format("server: %s: %s failed: %s", self.name, step[1], sub(msg, 1, 160))
            else
                msg = format("connection: %s: %s", self.name, msg)
            end
            return nil, msg, code
        end
        if step[1] == "ROLE" and (type(v) ~= "table" or v[1] ~= "master") then
            ngx_sentinel.forget(self)
            return nil, format("connection: %s: the sentinels name a server that is not a master"
                .. " (ROLE: %s)", self.name, type(v) == "table" and tostring(v[1]) or "?"),
                "connection", true
        end
    end
    return true, #steps
end

ngx_sentinel.init({ exchange = exchange, handshake = handshake, setup = setup })

-- Closes the idle connections of a pool: each connect() to it hands out
-- one of them until a new connection would be made.
local function drain(host, port, pool, most)
    for _ = 1, most do
        local sock = ngx.socket.tcp()
        sock:settimeouts(100, 100, 100)
        if not sock:connect(host, port, { pool = pool }) then return end
        local reused = sock:getreusedtimes() > 0
        sock:close()
        if not reused then return end
    end
end

-- What names a Cluster node in messages, and the settings its
-- connections take (the server's credentials and TLS): what setup,
-- handshake and io_failure read of a server.
local function view(self, node)
    local v = self.node_views[node]
    if not v then
        v = { name = node.name, spec = self.spec, host = node.dial }
        self.node_views[node] = v
    end
    return v
end

-- A socket connected (or from the pool): sock, nil, nil, read timeout in
-- effect (ms); or nil, message, timed_out. tmo: a fan-out's time limit instead of the
-- server's timeouts, doubled for what a new connection has to do first.
-- node: a Cluster node (redlock.ngx_cluster) to connect to, or nil.
local function connect(self, tmo, node)
    local sock, err = ngx.socket.tcp()
    if not sock then
        return nil, format("connection: %s: could not make a socket (%s)", self.name, tostring(err))
    end
    local cto, rto = self.connect_timeout, self.timeout
    if tmo then cto, rto = 2 * tmo, 2 * tmo end
    sock:settimeouts(cto, rto, rto)
    local host, port, pool = self.host, self.port, self.pool
    if node then
        host, port = node.dial, node.port
        pool = self.node_pools[node]
        if not pool then
            pool = pool_name(self, host, port)
            self.node_pools[node] = pool
        end
    elseif self.sentinel then
        host, port = ngx_sentinel.address(self)
        if not host then return nil, port, false end
        pool = pool_name(self, host, port)
        local st = self.sentinel
        if st.used_pool ~= pool then
            -- the master moved: this worker's idle connections to the old
            -- one are closed now, not when keepalive_timeout ends them
            if st.used_pool then drain(st.used_host, st.used_port, st.used_pool, self.pool_size) end
            st.used_host, st.used_port, st.used_pool = host, port, pool
        end
    elseif not pool then
        pool = pool_name(self)
        self.pool = pool
    end
    local ok
    if self.path then
        ok, err = sock:connect(self.path, { pool = pool })
    else
        ok, err = sock:connect(host, port, { pool = pool })
    end
    if not ok then
        local timed_out = err == "timeout"
        if timed_out then err = format("timed out after %d ms", cto) end
        if self.sentinel then
            ngx_sentinel.forget(self) -- a dead master: ask the sentinels next time
            err = format("%s at %s:%d", tostring(err), host, port)
        end
        return nil, format("connection: %s: could not connect (%s)", (node or self).name, tostring(err)),
            timed_out
    end
    -- (nil: nginx closed it already; never skip the handshake on that)
    local times = sock:getreusedtimes()
    if not times then
        sock:close()
        return nil, format("connection: %s: could not connect (closed)", (node or self).name), false
    end
    if self.spec.tls and self.path == nil and times == 0 then
        local done
        done, err = handshake(node and view(self, node) or self, sock, node and node.host or host)
        if not done then
            sock:close()
            return nil, err, false
        end
    end
    if tmo and sock:getreusedtimes() > 0 then
        rto = tmo
        sock:settimeouts(tmo, tmo, tmo)
    end
    return sock, nil, nil, rto
end

local function command_name(first)
    if type(first) ~= "string" then return "" end
    -- most commands come upper-case already: skip the copy then
    local b = byte(first, 1)
    if b and b >= 97 and b <= 122 then return upper(first) end
    return first
end

local ASKING = encode("ASKING")

-- Sends req (after ASKING when ask) and reads its reply, as exchange does.
local function exchange_asking(sock, rd, req, ask)
    if not ask then return exchange(sock, rd, req) end
    local sent, err = sock:send(ASKING .. req)
    if not sent then return nil, err end
    local ok, v = next_reply(sock, rd) -- ASKING's +OK (an error shows in the command's reply)
    if not ok then return nil, v end
    return next_reply(sock, rd)
end

-- One try of a request on a pinned, pooled or new connection. Returns the
-- reply, or nil, message, code, stale, timed_out, raw (stale: a pooled
-- connection that the server had closed, worth one more try on a fresh
-- one; raw: a server error's own text). After a NOSCRIPT reply to EVALSHA of `script`, sends EVAL of its
-- source on the same connection (nkeys and the rest are the script's
-- arguments). tmo: a fan-out's time limit (see connect), or nil.
-- w: { req = the encoded WAIT, ms = how much longer its reply may take }
-- sent in the same write as req (replica acknowledgement), or nil; the
-- script's reply is then followed by WAIT's: {acked, fsynced}, or a
-- message when WAIT failed (an error reply, or the connection after the
-- script's reply).
-- node: the Cluster node to send it to (redlock.ngx_cluster), else nil;
-- ask: send ASKING first, in the same write (an ASK redirection: both on
-- one connection). A Cluster's redirection (MOVED, ASK, TRYAGAIN,
-- CLUSTERDOWN) comes back as a server error, raw for the caller to follow.
local function attempt(self, node, ask, cmd, req, tmo, w, script, nkeys, ...)
    local co = running()
    local pinned = self.pinned
    local sock = pinned[co]
    local was_pinned = sock ~= nil
    local reused = was_pinned
    local limit = self.timeout
    local who = node and view(self, node) or self
    local err, code
    if not sock then
        local timed_out
        sock, err, timed_out, limit = connect(self, tmo, node)
        if not sock then return nil, err, "connection", false, timed_out end
        reused = sock:getreusedtimes() > 0
    end
    local rd = reader(self)
    local fresh = false -- a new connection that has read nothing yet
    if not reused then
        local ok, retry
        ok, err, code, retry = setup(who, sock, rd, limit)
        if not ok then
            sock:close()
            return nil, err, code, retry == true
        end
        fresh = err == 0
        self.made = self.made + 1
    end
    local ok, v, msg, wres
    if w then
        limit = limit + w.ms
        sock:settimeouts(limit, limit, limit)
        ok, v, msg, code = exchange_asking(sock, rd, req .. w.req, ask)
        if ok and v == nil and script and code == "server" and sub(msg, 1, 8) == "NOSCRIPT" then
            ok, v = next_reply(sock, rd) -- WAIT's, for a script that did not run
            if ok then
                ok, v, msg, code = exchange_asking(sock, rd,
                    encode("EVAL", script.source, nkeys, ...) .. w.req, ask)
            end
        end
        if ok and v ~= nil then
            local wok, wv, wmsg, wcode = next_reply(sock, rd)
            if not wok then
                pinned[co] = nil
                sock:close()
                return v, io_failure(who, wv, "waiting for WAIT's reply", limit)
            end
            local acked, fsynced = wait_counts(wv)
            if acked then
                wres = { acked, fsynced }
            elseif wv == nil and wcode == "server" then
                wres = format("server: %s: %s", who.name, sub(wmsg, 1, 200))
            else
                wres = format("server: %s: unexpected reply to WAIT", who.name)
            end
        elseif ok and v == nil and code == "server" and node and ngx_cluster.redirection(self, msg) then
            -- the script did not run there: WAIT's reply (due after up to
            -- its timeout when the node lacks the replicas) is not worth
            -- waiting for; the connection goes instead
            pinned[co] = nil
            sock:close()
            return nil, format("server: %s: %s", who.name, sub(msg, 1, 200)), "server", false, false, msg
        elseif ok and v == nil and code == "server" then
            local wok, werr = next_reply(sock, rd) -- WAIT's, after the script's error
            if not wok then ok, v = nil, werr end
        end
    else
        ok, v, msg, code = exchange_asking(sock, rd, req, ask)
        if ok and v == nil and script and code == "server" and sub(msg, 1, 8) == "NOSCRIPT" then
            ok, v, msg, code = exchange_asking(sock, rd, encode("EVAL", script.source, nkeys, ...), ask)
        end
    end
    if not ok then
        pinned[co] = nil
        sock:close()
        -- no retry on a pinned connection: a fresh one lacks its WATCH state
        return nil, io_failure(who, v, "waiting for a reply", limit, fresh), "connection",
            reused and not was_pinned and v ~= "timeout", v == "timeout"
    end
    if v == nil and code ~= "server" then -- protocol error: the stream is lost
        pinned[co] = nil
        sock:close()
        return nil, format("connection: %s: %s", who.name, msg), code, false
    end
    if v == nil and self.sentinel and ngx_sentinel.demoted(msg) then
        -- the master became a replica: nothing was written, a retry asks
        -- the sentinels where the master is now
        pinned[co] = nil
        sock:close()
        ngx_sentinel.forget(self)
        return nil, format("connection: %s: the master became a replica (%s)", self.name,
            sub(msg, 1, 80)), "connection", true
    end
    keep_reader(self, rd)
    if cmd and (PIN[cmd] or (pinned[co] and not UNPIN[cmd])) then
        pinned[co] = sock
    else
        pinned[co] = nil
        local kept = sock:setkeepalive(self.keepalive_timeout, self.pool_size)
        if not kept then sock:close() end
    end
    if v == nil then
        return nil, format("server: %s: %s", who.name, sub(msg, 1, 200)), "server", false, false, msg
    end
    return v, wres
end

-- Redirections followed at once; past these a request waits a little
-- before each further one (nodes that disagree while a slot changes hands
-- send it back and forth), until its time limit (csrc/cluster.c's rule).
local QUICK_TRIES = 3

-- One command to one node of a Cluster (CLUSTER SLOTS), once more on a
-- new connection when the pooled one was stale.
local function cluster_exchange(self, node, ...)
    local cmd, req = command_name((...)), encode(...)
    local r, err, code, stale = attempt(self, node, false, cmd, req, nil, nil)
    if r == nil and stale then r, err, code = attempt(self, node, false, cmd, req, nil, nil) end
    return r, err, code
end

-- attempt for a server of a Cluster: the request goes to the master of
-- slot (any node for -1), and MOVED, ASK, TRYAGAIN and CLUSTERDOWN are
-- followed as csrc/cluster.c does, within the time limit (tmo, or the
-- server's timeout): MOVED reloads the map, but believes MOVED for the
-- slot; ASK sends ASKING and the request to the node named; TRYAGAIN and
-- CLUSTERDOWN pause 5..40 ms and try again; an unreachable node gets the
-- map reloaded from another node before one more try. Every request
-- repeated this way is safe to repeat: a script finding our own token
-- counts it as ours.
local function routed(self, slot, cmd, req, tmo, w, script, nkeys, ...)
    local deadline = now() + (tmo or self.timeout)
    local tries, pause, ask_node, reloaded = 0, 5, nil, false
    while true do
        local node, ask = ask_node, ask_node ~= nil
        if not node then
            local err, code
            node, err, code = ngx_cluster.node_for(self, slot, cluster_exchange)
            if not node then return nil, err, code end
        end
        ask_node = nil
        local v, err, code, stale, timed_out, raw =
            attempt(self, node, ask, cmd, req, tmo, w, script, nkeys, ...)
        if v ~= nil then return v, err end
        local kind, s, target
        if code == "server" then kind, s, target = ngx_cluster.redirection(self, raw) end
        if kind then
            if kind == "moved" or kind == "ask" then tries = tries + 1 end
            if kind == "tryagain" or kind == "down" or tries > QUICK_TRIES then
                -- a slot half migrated, a failover under way: passes on
                -- its own, so it is retried until the time limit
                if now() + pause > deadline then return nil, err, code end
                ngx.sleep(pause / 1000)
                if pause < 40 then pause = pause * 2 end
            end
            if kind == "moved" then
                -- a resharding moves many slots: reload the whole map
                ngx_cluster.forget(self)
                ngx_cluster.load(self, cluster_exchange)
                if target then ngx_cluster.moved(self, s, target) end
            elseif kind == "ask" then
                if not target then
                    return nil, format("server: %s: unreadable ASK redirection", self.name), "server"
                end
                ask_node = target
            elseif kind == "down" then
                ngx_cluster.forget(self) -- the map may change with the failover
            end
        elseif code == "connection" and not stale and not reloaded and not self.pinned[running()]
            and now() < deadline then
            -- the node may be gone (failover): ask another for the map
            reloaded = true
            if slot < 0 then
                if ngx_cluster.any_node(self, node) == node then return nil, err, code, stale, timed_out end
            else
                ngx_cluster.forget(self)
                if not ngx_cluster.load(self, cluster_exchange)
                    or ngx_cluster.node_for(self, slot, cluster_exchange) == node then
                    return nil, err, code, stale, timed_out
                end
            end
        else
            return nil, err, code, stale, timed_out
        end
    end
end

local function closed()
    return nil, "closed: the connection is closed", "closed"
end

-- One command, never retried: reply, or nil, message, code, stale.
local function command(self, ...)
    if self.closed then return closed() end
    if not yieldable() then return fallback(self).conn:command(...) end
    local req = encode(...) -- raises on bad arguments, before any I/O
    if self.cluster then
        return routed(self, ngx_cluster.command_slot(...), command_name((...)), req, nil, nil)
    end
    return attempt(self, nil, false, command_name((...)), req, nil, nil)
end

local function check_script(name, nkeys, n)
    local script = type(name) == "string" and scripts[name]
    if not script then error("bad argument #1 to 'eval' (unknown script)", 3) end
    if type(nkeys) ~= "number" or nkeys < 0 or nkeys > n then
        error("bad argument #2 to 'eval' (numkeys out of range)", 3)
    end
    return script
end

-- One script run, never retried: reply, or nil, message, code, stale.
local function eval(self, script, name, nkeys, ...)
    if self.closed then return closed() end
    if not yieldable() then return fallback(self).conn:eval(name, nkeys, ...) end
    local req = encode("EVALSHA", script.sha, nkeys, ...)
    if self.cluster then
        return routed(self, ngx_cluster.script_slot(nkeys, (...)), nil, req, nil, nil, script, nkeys, ...)
    end
    return attempt(self, nil, false, nil, req, nil, nil, script, nkeys, ...)
end

-- The encoded WAIT (or WAITAOF) of replica acknowledgement.
local function wait_request(replicas, ms, aof)
    if aof then return { req = encode("WAITAOF", 1, replicas, ms), ms = ms + 100 } end
    return { req = encode("WAIT", replicas, ms), ms = ms + 100 }
end

-- What other modules reach as server.conn (legacy mode sends the commands
-- of a WATCH..EXEC sequence there, without Server:call's retry): a
-- core.conn's interface, routed per phase like the server's own calls.
local Conn = {}
Conn.__index = Conn

function Conn:command(...) return command(self.server, ...) end

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

-- core.conn's eval_wait (see csrc/conn.c): the script and WAIT in one
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
    local w = wait_request(replicas, ms, aof)
    if server.cluster then
        return waited(routed(server, ngx_cluster.script_slot(nkeys, (...)), nil, req, nil, w, script,
            nkeys, ...))
    end
    return waited(attempt(server, nil, false, nil, req, nil, w, script, nkeys, ...))
end

--- Whether a connection is open for this caller now: in cosocket phases,
-- one held since WATCH or MULTI (the state a caller may need to clean up).
function Conn:connected()
    local server = self.server
    if not yieldable() then return fallback(server).conn:connected() end
    return server.pinned[running()] ~= nil
end

function Conn:name() return self.server.name end
function Conn:close() return self.server:close() end

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
        connect_timeout = spec.connect_timeout or o.connect_timeout or 1000,
        -- 0 is "no timeout" for hiredis; cosockets want a number of ms
        timeout = (spec.timeout == 0 and 86400000) or spec.timeout or o.timeout or 1000,
        keepalive_timeout = o.keepalive_timeout or 60000,
        pool_size = o.pool_size or 32,
        readers = {},
        -- Sentinel: where the master is (redlock.ngx_sentinel), or nil
        sentinel = ngx_sentinel.new(spec, spec.connect_timeout or o.connect_timeout or 1000,
            spec.timeout or o.timeout or 1000),
        -- Cluster: this worker's slot map for its seeds (redlock.ngx_cluster),
        -- the pool and the names for each node; or nil
        cluster = ngx_cluster.new(spec),
        node_pools = {},
        node_views = {},
        slot_fences = b.slot_fences,
        -- coroutine -> socket held between WATCH/MULTI and EXEC; weak, so a
        -- finished request's coroutine does not keep anything alive
        pinned = setmetatable({}, { __mode = "k" }),
        -- connections made with setup() (see Server:connects)
        made = 0,
        closed = false,
    }, Server)
    self.conn = setmetatable({ server = self }, Conn)
    -- a Cluster's release subscriber (redlock.ngx_wait): one per worker,
    -- seeds and credentials, as a pool is
    if self.cluster then self.wait_id = pool_name(self, self.cluster.id, 0) end
    return self
end

--- A connection of its own (never pooled), with AUTH and SELECT done, whose
-- reads time out after read_ms: redlock.ngx_wait's subscriber. Returns
-- sock, reader, host, port (the address connected to); or nil, message.
function _M.open(server, read_ms)
    local sock, err = ngx.socket.tcp()
    if not sock then return nil, tostring(err) end
    sock:settimeouts(server.connect_timeout, server.timeout, read_ms)
    local ok
    local host, port, who = server.host, server.port, server
    local node
    if server.sentinel then
        host, port = ngx_sentinel.address(server)
        if not host then return nil, port end
    elseif server.cluster then
        -- any node: a Cluster delivers every PUBLISH (a script's too) to
        -- all its nodes
        node = ngx_cluster.any_node(server)
        host, port, who = node.dial, node.port, view(server, node)
    end
    if server.path then
        ok, err = sock:connect(server.path)
    else
        ok, err = sock:connect(host, port)
    end
    if not ok then
        if node then ngx_cluster.any_node(server, node) end -- the next try goes to another
        return nil, format("connection: %s: could not connect (%s)", who.name, tostring(err))
    end
    if server.spec.tls and server.path == nil then
        ok, err = handshake(who, sock, node and node.host or host)
        if not ok then
            sock:close()
            return nil, err
        end
    end
    local rd = new_reader()
    ok, err = setup(who, sock, rd, server.timeout)
    if not ok then
        sock:close()
        return nil, err
    end
    return sock, rd, host, port
end

--- Waiting for a release: a blocking BLPOP per waiter has no place in an
-- nginx worker; one subscriber per worker wakes its waiters instead
-- (redlock.ngx_wait). nil: the caller sleeps (polls) this time.
-- since: when the attempt that failed was sent (core.now()).
function Server:wait(key, ms, since)
    -- (legacy mode's releases publish nothing: its waiters poll)
    if not self.ops.wait or not yieldable() then return nil end
    return ngx_wait.wait(self, key, ms, since)
end

--- How many connections to this server this worker has made (pooled
-- ones and the hiredis ones of the phases without cosockets): a new one may
-- reach a server with other settings (redlock.detect asks again).
function Server:connects() return self.made + fallback(self).conn:connects() end

--- The renewal thread (csrc/renew.c) runs outside the event loop with
-- blocking connections of its own: it copies the hiredis server's settings.
function Server:renewal_conn() return self.fallback.conn end

--- Runs a command; nil, message, code on failure. A pooled connection that
-- the server closed is not a failure of this call: it sends once more on a
-- new connection.
function Server:call(...)
    local r, err, code, stale = command(self, ...)
    if r == nil and stale then r, err, code = command(self, ...) end
    return r, err, code
end

--- Runs a named script of the core (EVALSHA, EVAL on NOSCRIPT).
function Server:eval(name, nkeys, ...)
    local script = check_script(name, nkeys, select("#", ...))
    local r, err, code, stale = eval(self, script, name, nkeys, ...)
    if r == nil and stale then r, err, code = eval(self, script, name, nkeys, ...) end
    return r, err, code
end

-- One server's part of a fan-out, in its own light thread.
local function fan_one(server, tmo, w, script, nkeys, ...)
    if server.closed then return closed() end
    local req = encode("EVALSHA", script.sha, nkeys, ...)
    if server.cluster then
        return routed(server, ngx_cluster.script_slot(nkeys, (...)), nil, req, tmo, w, script, nkeys, ...)
    end
    return attempt(server, nil, false, nil, req, tmo, w, script, nkeys, ...)
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
        local ok, v, err, code, stale, timed_out = ngx.thread.wait(threads[i])
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
            flags[i] = (timed_out and "timeout") or (stale and "stale") or nil
        end
    end
    if w then return vals, errs, codes, flags, acks, fsyncs end
    return vals, errs, codes, flags
end

--- Redlock's fan-out (core.fanout_eval's contract, see csrc/fanout.c) for
-- servers of this transport: conns are their server.conn. Where the phase
-- may yield, one light thread per server (ngx.thread.spawn), so the call
-- costs the slowest answer, each limited to timeout ms (twice that on a
-- new connection); elsewhere core.fanout_eval over their blocking
-- connections. Returns values, errs, codes, flags ("timeout", "stale").
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

--- core.fanout_eval_wait's contract (csrc/fanout.c) for this transport:
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
-- A failed extend that is not "not owner" (Redis slow or away) is tried
-- again at the next tick while the lock may still be valid.
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
    local function again()
        local ok, err = ngx.timer.at(every / 1000, tick)
        if not ok then
            handle.active, handle.err = false, "renewal: could not start a timer: " .. tostring(err)
        end
        return ok, err
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
        local ok, err, code = lock:extend()
        if not ok and (code == "not owner" or code == "closed") then
            handle.active = false
            -- a release that ran while this extend waited is no loss
            if code == "not owner" and not lock.released then
                handle.lost, handle.err = true, err
                if opts.on_lost then pcall(opts.on_lost, lock) end
            end
            return
        end
        if not ok then handle.err = err end
        again()
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

return _M
