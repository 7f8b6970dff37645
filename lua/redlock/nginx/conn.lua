--- The nginx transport's connections (redlock.nginx.cosocket's servers): cosockets
-- connected or taken from nginx's pool (pool names, TLS, AUTH, SELECT, the
-- ROLE check of a Sentinel's master in the topology core's rounds), pinned
-- for WATCH..EXEC, and the transport's one request loop, which carries out
-- the topology core's verdicts for every kind of server (a Cluster's
-- through redlock.nginx.cluster, a Sentinel's through redlock.nginx.sentinel).
-- Internal.
local core = require "redlock.core"
local blocking = require "redlock.server"

local ngx = rawget(_G, "ngx") -- nil outside nginx
local encode, new_reader, now = core.encode, core.reader, core.now
local role_verdict, wait_answer, sentinel_round = core.role_verdict, core.wait_answer, core.sentinel_round
local io_stale = core.io_stale
local type, tostring, ipairs, pcall = type, tostring, ipairs, pcall
local format, upper, sub, byte = string.format, string.upper, string.sub, string.byte
local running = coroutine.running

local _M = {}

-- Pooled connections this worker has made, to any server, never reset
-- (a fork copies it): the acquire without a script goes only while none
-- was made since a script ran (redlock.nginx.cosocket's Conn:grant). The pools
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
-- SELECT, so it must only be handed to a server with the same ones. host,
-- port: the node's, for a server with several (a Sentinel's master of the
-- moment, a Cluster's nodes), else nil.
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
    -- a Sentinel-managed server's pool is its master's of the moment, a
    -- Cluster's one per node (host, port: that address); without an
    -- address, the server's own name
    local where = host and format("%s@%s:%d", self.name, host, port) or self.name
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

-- next_reply's answer, with a reply the reader refused (a protocol error:
-- what follows in the stream is unknown) read as the connection lost: nil,
-- its text. (After a first reply, which reads such an answer itself.)
local function lost(ok, v, msg, code)
    if ok and v == nil and code ~= "server" then return nil, msg end
    return ok, v, msg, code
end

-- Sends one request and reads one reply (as next_reply).
local function exchange(sock, rd, req, raw)
    local sent, err = sock:send(req)
    if not sent then return nil, err end
    return next_reply(sock, rd, raw)
end

-- fresh: nothing was read yet on this new connection. A TLS port resets a
-- plain client that speaks RESP to it: say so (csrc/connection/tls.c's
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
    if self.kind and self.kind.rounds then steps[#steps + 1] = { "ROLE", encode("ROLE") } end
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
                -- (the round's outcome: not a master yet, or ROLE refused)
                self.kind.forget(self)
                return nil, why, master == 0 and "connection" or "server", master
            end
        end
    end
    return true, #steps
end

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
-- effect (ms), how many times it was reused; or nil, message, timed_out,
-- and true when no sentinel named a master.
-- tmo: a fan-out's time limit instead of the server's timeouts, doubled
-- for what a new connection has to do first.
-- node: a Cluster node (redlock.nginx.cluster) to connect to, or nil.
local function connect(self, tmo, node)
    local sock, err = ngx.socket.tcp()
    if not sock then
        return nil, format("connection: %s: could not make a socket (%s)", self.name, tostring(err))
    end
    local cto, rto = self.connect_timeout, self.timeout
    if tmo then cto, rto = 2 * tmo, 2 * tmo end
    sock:settimeouts(cto, rto, rto)
    local host, port, pool = self.kind.address(self, node)
    if not host then return nil, port, false, true end
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
        if self.kind.unreached then err = self.kind.unreached(self, err, host, port) end
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

-- A connection for one try of a request: the caller's pinned one (between
-- WATCH and EXEC), or a pooled or new one (connected, TLS, AUTH, SELECT; a
-- Sentinel's master found in the topology core's rounds: connected and
-- checked with ROLE, else the sentinels asked again). Returns c = { sock,
-- rd, reused, pinned, fresh, limit, who }, or nil, message, code,
-- timed_out. node: a Cluster node, or nil. tmo: see connect.
local function open_conn(self, node, tmo)
    local sock = self.pinned[running()]
    local c = { sock = sock, rd = reader(self), reused = sock ~= nil, pinned = sock ~= nil,
        fresh = false, limit = self.timeout, who = node and view(self, node) or self }
    local round = 0
    while not sock do
        local err, code, timed_out, limit, times, outcome
        round = round + 1
        sock, err, timed_out, limit, times = connect(self, tmo, node)
        code = "connection"
        if not sock then
            -- (limit: true when no sentinel names a master: final)
            if not self.kind.rounds or limit then return nil, err, code, timed_out end
            outcome = -2
        elseif times > 0 then
            c.sock, c.reused, c.limit = sock, true, limit
        else
            c.limit = limit
            local ok, steps, why
            ok, steps, code, why = setup(c.who, sock, c.rd, c.limit)
            if ok then
                c.sock, c.fresh = sock, steps == 0
                self.made, made_in_worker = self.made + 1, made_in_worker + 1
                break
            end
            sock:close()
            sock, err, outcome = nil, steps, why or -2
        end
        if not sock then
            local v, ms = "fail", nil
            if self.kind.rounds then v, ms = sentinel_round(round, outcome) end
            if v == "fail" then return nil, err, code, timed_out end
            c.rd = new_reader() -- (the failed exchange may have left bytes in it)
            ngx.sleep(ms / 1000)
        end
    end
    return c
end

-- Gives c back after its request (answered: not with an error reply):
-- kept for the caller after WATCH or MULTI (until a command that ends that
-- state; a WATCH or MULTI refused starts nothing), or for a sequence
-- (redlock.nginx.cosocket's Server:sequence: every command stays on the
-- connection the first took, until let_go; tx_open: a WATCH or MULTI not
-- ended yet); else to the pool.
local function release(self, c, cmd, answered)
    local pinned, co = self.pinned, running()
    local pin = PIN[cmd] and answered
    keep_reader(self, c.rd)
    if self.kept then
        pinned[co] = c.sock
        if pin then self.tx_open = true elseif UNPIN[cmd] then self.tx_open = false end
    elseif pin or (cmd and pinned[co] and not UNPIN[cmd]) then
        pinned[co] = c.sock
    else
        pinned[co] = nil
        if not c.sock:setkeepalive(self.keepalive_timeout, self.pool_size) then c.sock:close() end
    end
end

--- The end of a sequence (self: its view, redlock.nginx.cosocket's
-- Server:sequence; co: its coroutine): the connection its commands kept
-- goes back to the pool, or is closed when a WATCH or MULTI of it is still
-- open.
local function let_go(self, co)
    local sock = self.pinned[co]
    if not sock then return end
    self.pinned[co] = nil
    if self.tx_open or not sock:setkeepalive(self.keepalive_timeout, self.pool_size) then sock:close() end
end

-- Drops c: a reply is still due on it, or its stream is lost.
local function discard(self, c)
    self.pinned[running()] = nil
    c.sock:close()
end

-- Sends prefix (ASKING, or nil), req and tail (or nil) in one write, and
-- reads the prefix's reply (ASKING's +OK: an error shows in the command's)
-- and req's, as next_reply does.
local function send(c, prefix, req, tail)
    if prefix then req = prefix .. req end
    if tail then req = req .. tail end
    local sent, err = c.sock:send(req)
    if not sent then return nil, err end
    if prefix then
        local ok, v = next_reply(c.sock, c.rd)
        if not ok then return nil, v end
    end
    return next_reply(c.sock, c.rd)
end

-- The tail's reply after req's: true and, with w.reply, the reply as it is
-- (value, or nil and an error reply's text), else WAIT's answer as the core
-- reads it ({acked, fsynced}, or a message); or false, message, timed_out
-- when it did not come.
local function tail_reply(c, w)
    local ok, v, msg, code = next_reply(c.sock, c.rd, not w.reply)
    if not ok then
        local doing = w.reply and "waiting for a reply" or w.what
        return false, io_failure(c.who, v, doing, c.limit), v == "timeout"
    end
    if v == nil and code ~= "server" then -- protocol error: the stream is lost
        return false, format("connection: %s: %s", c.who.name, msg), false
    end
    if w.reply then return true, v, msg end
    local acked, fsynced = wait_answer(v, c.who.name, w.aof)
    v:free()
    if not acked then return true, fsynced end
    return true, { acked, fsynced }
end

-- The kinds of server as this transport carries them out, the
-- counterpart of csrc/connection/conn.h's redlock_conn_kind, one per
-- kind of the topology core (core.topology_kinds()): plain's here, each
-- other kind's in redlock.nginx.<name>, whose kind(primitives) makes it
-- (primitives: this file's exchange, handshake, setup, pool_name, drain and
-- query). An entry: the spec's field that makes a server of that kind
-- (option; none for plain, the default), the kind's state (init; with the
-- name of the server's release subscriber, redlock.nginx.wait, one per
-- worker: address, database, credentials, as a pool's, made before any
-- connection), where a connection goes (address: host, port, pool; or nil,
-- message when the address is not known), what a failed connect means
-- (unreached), and the verdicts' actions (node: a Cluster's node i;
-- any_node: a node for a command without a key; reload: its map; forget: a
-- Sentinel's master). routed: commands go by their key's slot; rounds: a
-- new connection is checked with ROLE, in the core's rounds.
local PLAIN_TOPO = core.topology("plain")
local KINDS = {
    plain = {
        init = function(self)
            self.topo = PLAIN_TOPO
            self.pool = pool_name(self)
            self.wait_id = self.pool
        end,
        address = function(self) return self.host, self.port, self.pool end,
    },
}
local KIND_NAMES = core.topology_kinds()

--- The kind of server a spec describes (KINDS): the first kind whose
-- option the spec has, plain without one.
local function kind_of(spec)
    for _, name in ipairs(KIND_NAMES) do
        local kind = KINDS[name]
        if kind.option and spec[kind.option] ~= nil then return kind end
    end
    return KINDS.plain
end

--- One request, as the topology core says (csrc/topology/topo.h): the nginx
-- transport's one request loop, the counterpart of csrc/drivers/conn.c's. The core
-- names where it goes (a Cluster's node; ASKING first after an ASK) and
-- what a reply or a failure means (NOSCRIPT: EVAL of `script` on the same
-- connection, nkeys and the rest its arguments; a stale pooled connection:
-- once more on a fresh one; a Sentinel master turned replica: the
-- sentinels asked again; MOVED, ASK, TRYAGAIN, CLUSTERDOWN, a failed node),
-- and this loop does it. slot: the key's (-1: none; only a Cluster's
-- commands go by it); flags: topology:attempt's ("s" a script, "c" sent
-- again by its caller only; a caller holding a connection since WATCH adds
-- "k": never sent again); cmd: the command's name (for WATCH..EXEC's
-- pinning), or nil; tmo: a fan-out's time limit (see connect), or nil.
-- w: { req = the encoded tail, sent in the same write after req: WAIT (w.aof
-- WAITAOF; w.what for its message) or, with w.reply, the grant's XADD, and
-- ms = how much longer its reply may take }, or nil. Returns the reply and,
-- with w, WAIT's answer ({acked, fsynced}, or a message when WAIT failed)
-- or XADD's reply (reply, error text; its loss is a failure, which the
-- caller may send again as core.io_stale says); or nil, message, code,
-- retry (true: the caller may send it again; "moved"), timed_out. With
-- w.pooled, only on a
-- pooled connection: a new one is made, kept, and the answer is nil, nil,
-- NEW_CONN (nothing sent).
local function request(self, slot, flags, cmd, req, tmo, w, script, nkeys, ...)
    local kind = self.kind
    if self.pinned[running()] then flags = flags .. "k" end
    -- the verdict and what comes with it (topology:attempt's words); a kind
    -- that is not routed sends to its one node, nothing before it, and its
    -- attempt starts at the first outcome that is not the answer (as
    -- csrc/drivers/conn.c's, REDLOCK_ONE_NODE)
    local at, v, x, y, z
    if kind.routed then
        at = self.topo:attempt(slot, flags, tmo or self.timeout, now())
        v, x, y, z = at:next(now())
    else
        v, x = "go", 1
    end
    local c, eval_req, due, timed_out -- due: the tail's reply is still to come on c
    while true do
        if v == "go" then
            local err, code
            c, err, code, timed_out = open_conn(self, kind.node and kind.node(self, x) or nil, tmo)
            if not c then
                if code ~= "connection" then return nil, err, code, false end -- (AUTH refused)
                at = at or self.topo:attempt(slot, flags, tmo or self.timeout, now())
                v, x, y, z = at:io_failed(err, now(), false, timed_out)
            elseif w and w.pooled and not c.reused then
                -- a new connection (AUTH, SELECT done) that no script ran on:
                -- kept for the next caller, and nothing sent
                release(self, c)
                return nil, nil, NEW_CONN
            else
                if w and w.ms > 0 then
                    c.limit = c.limit + w.ms
                    c.sock:settimeouts(c.limit, c.limit, c.limit)
                end
                v, x = "send", y
            end
        elseif v == "eval" then -- the EVAL form, on the same connection
            eval_req = eval_req or encode("EVAL", script.source, nkeys, ...)
            if due then
                local ok, err = lost(next_reply(c.sock, c.rd)) -- WAIT's, for a script that did not run
                if not ok then
                    discard(self, c)
                    return nil, io_failure(c.who, err, "waiting for a reply", c.limit), "connection", false,
                        err == "timeout"
                end
            end
            v = "send"
        elseif v == "pause" then
            ngx.sleep(x / 1000)
            v, x, y, z = at:next(now())
        elseif v == "reload" then
            local ok, err, code = kind.reload(self)
            if not ok then return nil, err, code, false end
            v, x, y, z = at:next(now())
        elseif v == "switch" then
            kind.forget(self)
            v, x, y, z = at:next(now())
        elseif v == "resend" then
            v, x, y, z = at:next(now())
        else -- "fail": message, code, retry
            return nil, x, y, z, timed_out
        end
        if v == "send" then -- (x: the prefix)
            local ok, r, msg, code = send(c, x, eval_req or req, w and w.req)
            due = ok and w and w.req
            if not ok then
                discard(self, c)
                timed_out = r == "timeout"
                at = at or self.topo:attempt(slot, flags, tmo or self.timeout, now())
                v, x, y, z = at:io_failed(io_failure(c.who, r, "waiting for a reply", c.limit, c.fresh),
                    now(), c.reused, timed_out)
            elseif r == nil and code ~= "server" then -- protocol error: the stream is lost
                discard(self, c)
                return nil, format("connection: %s: %s", c.who.name, msg), code, false
            elseif r == nil then -- an error reply: the core reads it
                at = at or self.topo:attempt(slot, flags, tmo or self.timeout, now())
                v, x, y, z = at:reply(msg, now(), self.name)
                if v == "done" then
                    if due and not lost(next_reply(c.sock, c.rd)) then -- WAIT's, after the script's error
                        discard(self, c)
                    else
                        release(self, c, cmd, false)
                    end
                    return nil, format("server: %s: %s", c.who.name, sub(msg, 1, 200)), "server", false
                elseif v ~= "eval" then
                    -- refused, not run: the connection goes unless nothing is
                    -- due on it (WAIT's reply may take its whole timeout where
                    -- the node lacks the replicas)
                    if due or v == "switch" then discard(self, c) else release(self, c, cmd, false) end
                end
            else
                local wres, wtext
                if due then
                    local came
                    came, wres, wtext = tail_reply(c, w)
                    if not came then -- (wres: the message; wtext: timed out)
                        discard(self, c)
                        if w.reply then
                            return nil, wres, "connection", io_stale(c.reused, "tail", wtext), wtext
                        end
                        return r, wres
                    end
                end
                release(self, c, cmd, true)
                return r, wres, wtext
            end
        end
    end
end

local SLOTS = encode("CLUSTER", "SLOTS")

-- CLUSTER SLOTS on a connection to a Cluster node, for the topology core
-- (redlock.nginx.cluster's load): the reply as a core reply, or nil,
-- message, code, reused (the connection was made before), timed_out.
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
        return nil, io_failure(who, v, "waiting for a reply", limit), "connection", reused, v == "timeout"
    end
    if v == nil then -- a protocol error
        sock:close()
        return nil, format("connection: %s: %s", who.name, msg), code, false
    end
    keep_reader(self, rd)
    if not sock:setkeepalive(self.keepalive_timeout, self.pool_size) then sock:close() end
    return v
end

--- A connection of its own (never pooled), with AUTH and SELECT done, whose
-- reads time out after read_ms: redlock.nginx.wait's subscriber. Returns
-- sock, reader, host, port (the address connected to); or nil, message.
local function open(server, read_ms)
    local sock, err = ngx.socket.tcp()
    if not sock then return nil, tostring(err) end
    sock:settimeouts(server.connect_timeout, server.timeout, read_ms)
    local ok
    -- (a Cluster's any node: a Cluster delivers every PUBLISH, a script's
    -- too, to all its nodes)
    local any_node = server.kind.any_node
    local node = any_node and any_node(server) or nil
    local host, port = server.kind.address(server, node)
    if not host then return nil, port end
    local who = node and view(server, node) or server
    if server.path then
        ok, err = sock:connect(server.path)
    else
        ok, err = sock:connect(host, port)
    end
    if not ok then
        if node then any_node(server, node) end -- the next try goes to another
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

-- every other kind of the core, from its module
local primitives = { exchange = exchange, handshake = handshake, setup = setup, pool_name = pool_name,
    drain = drain, query = query }
for _, name in ipairs(KIND_NAMES) do
    if not KINDS[name] then KINDS[name] = require("redlock.nginx." .. name).kind(primitives) end
end

_M.fallback = fallback
_M.open = open
_M.pool_name = pool_name
_M.handshake = handshake
_M.setup = setup
_M.view = view
_M.command_name = command_name
_M.request = request
_M.kind_of = kind_of
_M.let_go = let_go
_M.NEW_CONN = NEW_CONN

return _M
