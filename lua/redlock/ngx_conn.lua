--- The nginx transport's connections (redlock.cosocket's servers): cosockets
-- connected or taken from nginx's pool (pool names, TLS, AUTH, SELECT, the
-- ROLE check of a Sentinel's master in the topology core's rounds), one
-- attempt of a request on one (pinned for WATCH..EXEC, WAIT in the same
-- write, NOSCRIPT's EVAL), and the Cluster's requests routed by the
-- topology core (redlock.ngx_cluster). Internal.
local core = require "redlock.core"
local blocking = require "redlock.server"
local ngx_sentinel = require "redlock.ngx_sentinel"
local ngx_cluster = require "redlock.ngx_cluster"

local ngx = rawget(_G, "ngx") -- nil outside nginx
local encode, new_reader = core.encode, core.reader
local topo_reply, role_verdict, TOPO = core.topo_reply, core.role_verdict, core.topo_rules
local select, type, tostring, ipairs, pcall = select, type, tostring, ipairs, pcall
local format, upper, sub, byte = string.format, string.upper, string.sub, string.byte
local running = coroutine.running
local unpack = table.unpack or unpack -- luacheck: ignore 143

local _M = {}

-- Pooled connections this worker has made, to any server, never reset
-- (a fork copies it): the acquire without a script goes only while none
-- was made since a script ran (redlock.cosocket's Conn:grant). The pools
-- are the worker's, shared by every client of the same server, so a
-- client's own count would miss another's new connection.
local made_in_worker = 0
function _M.made_in_worker() return made_in_worker end

-- Commands after which the connection carries state for the next command of
-- the same caller (WATCH ... EXEC, as legacy mode does): the socket stays
-- with the calling coroutine instead of going back to the pool, until a
-- command that ends that state.
local PIN = { WATCH = true, MULTI = true }
local UNPIN = { EXEC = true, DISCARD = true, UNWATCH = true }

-- attempt's answer to a request it sent nothing for, as asked (w.pooled):
-- the connection was new
local NEW_CONN = "new connection"

local READ_SIZE = 16384
local MAX_READERS = 8


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
-- message, "server"); or nil, error text of the socket. raw: the reply as a
-- core reply (reader:get(true)), for the topology core.
local function next_reply(sock, rd, raw)
    local err
    while true do
        local v, msg, code = rd:get(raw)
        if v ~= false then return true, v, msg, code end
        local data
        data, err = sock:receiveany(READ_SIZE)
        if not data then return nil, err end
        rd:feed(data)
    end
end

-- Sends one request and reads one reply (as next_reply).
local function exchange(sock, rd, req, raw)
    local sent, err = sock:send(req)
    if not sent then return nil, err end
    return next_reply(sock, rd, raw)
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
        local role = step[1] == "ROLE"
        local ok, v, msg, code = exchange(sock, rd, step[2], role)
        if not ok then return nil, io_failure(self, v, step[1], limit, i == 1), "connection" end
        if v == nil then
            if code == "server" then
                msg = format("server: %s: %s failed: %s", self.name, step[1], sub(msg, 1, 160))
            else
                msg = format("connection: %s: %s", self.name, msg)
            end
            return nil, msg, code
        end
        if role then
            -- the topology core's reading: a master; not one yet (another
            -- round); or ROLE refused (final)
            local master, why = role_verdict(v, self.name)
            v:free()
            if master ~= 1 then
                ngx_sentinel.forget(self)
                if master == 0 then return nil, why, "connection", true end
                return nil, why, "server"
            end
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

-- connect()'s options per pool name: made once, not per connect
local pool_opts = {}

-- A socket connected (or from the pool): sock, nil, nil, read timeout in
-- effect (ms), how many times it was reused; or nil, message, timed_out.
-- tmo: a fan-out's time limit instead of the server's timeouts, doubled
-- for what a new connection has to do first.
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
    local opts = pool_opts[pool]
    if not opts then
        opts = { pool = pool }
        pool_opts[pool] = opts
    end
    if self.path then
        ok, err = sock:connect(self.path, opts)
    else
        ok, err = sock:connect(host, port, opts)
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
    if tmo and times > 0 then
        rto = tmo
        sock:settimeouts(tmo, tmo, tmo)
    end
    return sock, nil, nil, rto, times
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
-- script's reply). With w.reply (the grant's XADD after its SET,
-- redlock.cosocket), the second reply comes back as it is: reply, reply2
-- (nil, and its error text, for an error reply); its loss is a failure
-- (stale unless it timed out: the first command ran). With w.pooled, only
-- on a pooled connection: a new one is made, kept, and the answer is nil,
-- nil, NEW_CONN (nothing sent). (w.req nil: no second command.)
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
    local rd = reader(self)
    local fresh = false -- a new connection that has read nothing yet
    -- a Sentinel's master that ROLE says is not one yet: the sentinels are
    -- asked again, in the topology core's rounds (csrc/topo.h)
    for round = 1, self.sentinel and not sock and TOPO.role_rounds or 1 do
        if not sock then
            local timed_out, times
            sock, err, timed_out, limit, times = connect(self, tmo, node)
            if not sock then return nil, err, "connection", false, timed_out end
            reused = times > 0
        end
        if reused then break end
        local ok, again
        ok, err, code, again = setup(who, sock, rd, limit)
        if ok then
            fresh = err == 0
            self.made, made_in_worker = self.made + 1, made_in_worker + 1
            break
        end
        sock:close()
        sock = nil
        if not again or round == TOPO.role_rounds then return nil, err, code, false end
        rd = new_reader() -- (the failed exchange may have left bytes in it)
        ngx.sleep(TOPO.role_pause / 1000)
    end
    if w and w.pooled and not reused then
        -- a new connection (AUTH, SELECT done) that no script ran on: kept
        -- for the next caller, and nothing sent (redlock.cosocket's grant)
        keep_reader(self, rd)
        if not sock:setkeepalive(self.keepalive_timeout, self.pool_size) then sock:close() end
        return nil, nil, NEW_CONN
    end
    local ok, v, msg, wres, wtext
    if w and w.req then
        if w.ms > 0 then
            limit = limit + w.ms
            sock:settimeouts(limit, limit, limit)
        end
        ok, v, msg, code = exchange_asking(sock, rd, req .. w.req, ask)
        if ok and v == nil and script and code == "server" and topo_reply("noscript", msg) then
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
                if w.reply then
                    local timed_out = wv == "timeout"
                    return nil, io_failure(who, wv, "waiting for a reply", limit), "connection",
                        not timed_out, timed_out
                end
                return v, io_failure(who, wv, "waiting for WAIT's reply", limit)
            end
            local acked, fsynced = wait_counts(wv)
            if w.reply then
                wres, wtext = wv, wmsg
            elseif acked then
                wres = { acked, fsynced }
            elseif wv == nil and wcode == "server" then
                wres = format("server: %s: %s", who.name, sub(wmsg, 1, 200))
            else
                wres = format("server: %s: unexpected reply to WAIT", who.name)
            end
        elseif ok and v == nil and code == "server" and node and topo_reply("redirect", msg) then
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
        if ok and v == nil and script and code == "server" and topo_reply("noscript", msg) then
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
    if v == nil and self.sentinel and topo_reply("demoted", msg) then
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
    return v, wres, wtext
end

local SLOTS = encode("CLUSTER", "SLOTS")

-- CLUSTER SLOTS on a connection to a Cluster node, for the topology core
-- (redlock.ngx_cluster's load): the reply as a core reply, or nil,
-- message, code, stale.
local function query(self, node)
    local sock, err, _, limit = connect(self, nil, node)
    if not sock then return nil, err, "connection", false end
    local who = view(self, node)
    local reused = sock:getreusedtimes() > 0
    local rd = reader(self)
    if not reused then
        local ok, code
        ok, err, code = setup(who, sock, rd, limit)
        if not ok then
            sock:close()
            return nil, err, code, false
        end
        self.made, made_in_worker = self.made + 1, made_in_worker + 1
    end
    local ok, v, msg, code = exchange(sock, rd, SLOTS, true)
    if not ok then
        sock:close()
        return nil, io_failure(who, v, "waiting for a reply", limit), "connection", reused and v ~= "timeout"
    end
    if v == nil then -- a protocol error
        sock:close()
        return nil, format("connection: %s: %s", who.name, msg), code, false
    end
    keep_reader(self, rd)
    if not sock:setkeepalive(self.keepalive_timeout, self.pool_size) then sock:close() end
    return v
end

-- attempt for a server of a Cluster: the request goes where the topology
-- core says (redlock.ngx_cluster.route drives it), within the time limit
-- (tmo, or the server's timeout).
local function routed(self, slot, cmd, req, tmo, w, script, nkeys, ...)
    local n, args = select("#", ...), { ... }
    local function send(node, ask)
        return attempt(self, node, ask, cmd, req, tmo, w, script, nkeys, unpack(args, 1, n))
    end
    return ngx_cluster.route(self, slot, tmo or self.timeout, self.pinned[running()] ~= nil, send, query)
end

_M.fallback = fallback
_M.pool_name = pool_name
_M.handshake = handshake
_M.setup = setup
_M.view = view
_M.command_name = command_name
_M.attempt = attempt
_M.routed = routed
_M.NEW_CONN = NEW_CONN

return _M
