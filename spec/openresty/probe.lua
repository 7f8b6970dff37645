--- Test-only handlers that spec/41-openresty_spec.lua loads into nginx
-- beside examples/openresty: what each phase did, and locations that hold
-- a lock, run a WATCH/MULTI/EXEC sequence, or lock with AUTH and SELECT.
-- Answers are "name=value" lines.
local redlock = require "redlock"
local cosocket = require "redlock.cosocket"
local counter = require "counter"
local store = require "store"

local ngx = ngx
local tostring, tonumber, pairs, sort, concat = tostring, tonumber, pairs, table.sort, table.concat

local _M = {}
local results = {}

local function outcome(lock, err)
    if not lock then return tostring(err) end
    local ok, rerr = lock:release()
    return ok and "ok" or tostring(rerr)
end

--- init_by_lua (the master): a lock over hiredis' blocking socket, which
-- leaves that socket open when the workers fork. redlock_ports: three Redis
-- servers for a Redlock client.
function _M.init(redlock_ports)
    local r = counter.redis
    _M.client = redlock.new { servers = { { host = r.host, port = r.port } } }
    local server = _M.client.servers[1]
    results.init = outcome(_M.client:try_acquire("probe:init"))
    results.init_transport = server.transport
    results.init_connected = tostring(server.fallback.conn:connected())
    _M.master_conn = server.fallback.conn
    -- the WATCH/MULTI recipe, forced (a normal server would pick scripts)
    _M.legacy = redlock.new { servers = { { host = r.host, port = r.port } }, mode = "legacy",
        ttl = 5000, wait = 30000, retry_delay = 5, retry_jitter = 5 }
    local servers = {}
    for i, port in ipairs(redlock_ports) do servers[i] = { host = r.host, port = port } end
    -- server_timeout: the default (25 ms at this ttl) is missed now and
    -- then on a loaded test host, and a majority that did not answer in
    -- time fails the acquire at once with no quorum, then stays in back-off
    -- for a second (as documented: "on a busy host, raise it"); these
    -- tests are about exclusion, not about that
    _M.redlock = redlock.new { servers = servers, ttl = 5000, wait = 30000, retry_delay = 5, retry_jitter = 5,
        server_timeout = 1000 }
end

--- init_worker_by_lua: no cosockets here either, so hiredis again, on a
-- connection of this worker's own; then a timer, where cosockets work.
function _M.init_worker()
    local pid = ngx.worker.pid()
    local server = _M.client.servers[1]
    results.init_worker = outcome(_M.client:try_acquire("probe:init_worker:" .. pid))
    results.init_worker_own_conn = tostring(server.fallback.conn ~= _M.master_conn)
    -- Redlock's fan-out, here over poll() and hiredis
    results.init_worker_redlock = outcome(_M.redlock:try_acquire("probe:init_worker_redlock:" .. pid))
    ngx.timer.at(0, function(premature)
        if premature then return end
        results.timer_phase = ngx.get_phase()
        results.timer = outcome(counter.client:acquire("probe:timer:" .. pid))
    end)
end

local function say_sorted(t)
    local keys = {}
    for k in pairs(t) do keys[#keys + 1] = k end
    sort(keys)
    for _, k in ipairs(keys) do ngx.say(k, "=", t[k]) end
end

--- GET /probe: what the phases of this worker did.
function _M.report()
    local server = counter.client.servers[1]
    local t = { pid = ngx.worker.pid(), content_transport = server.transport,
        -- the example client locks only in timers and requests: its hiredis
        -- connection must never have been opened
        content_blocking_connected = tostring(server.fallback.conn:connected()),
        legacy_mode = tostring(_M.legacy:mode()) }
    for k, v in pairs(results) do t[k] = v end
    say_sorted(t)
end

--- GET /unreleased?key=K: with_lock whose fn closes its own client, so
-- that the release fails: ok=, code=, n= (how many values it returned),
-- results= (fn's, after the code), err=, then held= (another client's
-- try_acquire of the key: its code; the key is then deleted by hand).
function _M.unreleased()
    local r = counter.redis
    local key = "probe:unreleased:" .. ngx.var.arg_key
    local c = redlock.new { servers = { { host = r.host, port = r.port } } }
    local function pack(...) return select("#", ...), { ... } end
    local n, t = pack(c:with_lock(key, { ttl = 60000 }, function()
        c:close()
        return "done", nil, 3
    end))
    local other = redlock.new { servers = { { host = r.host, port = r.port } } }
    local lock, _, code = other:try_acquire(key)
    if lock then lock:release() end
    other.servers[1]:call("DEL", key)
    other:close()
    say_sorted { ok = tostring(t[1]), code = tostring(t[3]), n = n, err = tostring(t[2]),
        results = concat({ tostring(t[4]), tostring(t[5]), tostring(t[6]) }, ","), held = tostring(code) }
end

--- GET /incr_legacy?key=K: the example's handler with the legacy client.
function _M.incr_legacy() return counter.incr(_M.legacy) end

--- GET /incr_redlock?key=K: the same with the Redlock client (3 servers).
function _M.incr_redlock() return counter.incr(_M.redlock) end

--- GET /hold?key=K&ms=N: holds lock:K for N ms (ngx.sleep), then releases.
function _M.hold()
    local lock, err = counter.client:acquire("lock:" .. ngx.var.arg_key)
    if not lock then
        ngx.status = 503
        return ngx.say(err)
    end
    ngx.sleep(tonumber(ngx.var.arg_ms) / 1000)
    local ok, rerr = lock:release()
    ngx.say(ok and "released" or rerr)
end

--- GET /notified?key=K&wait=MS&hold=MS: waits up to `wait` ms for lock:K
-- with a client whose polling would sleep 10 s between attempts
-- (retry_delay): only a wake-up from the worker's subscriber makes it try
-- before its wait is over. Holds the lock `hold` ms, releases it, answers
-- "taken"; or the error.
function _M.notified()
    local r = counter.redis
    local server = { host = r.host, port = r.port }
    if ngx.var.arg_tls_port then -- over TLS (the subscriber too): name checked
        server = { host = r.host, port = tonumber(ngx.var.arg_tls_port), tls = { server_name = ngx.var.arg_name } }
    end
    local client = redlock.new { servers = { server }, retry_delay = 10000,
        retry_jitter = 0, wait = tonumber(ngx.var.arg_wait) }
    local lock, err = client:acquire("lock:" .. ngx.var.arg_key)
    if not lock then return ngx.say(err) end
    ngx.sleep((tonumber(ngx.var.arg_hold) or 0) / 1000)
    lock:release()
    ngx.say("taken")
end

--- GET /fifo?key=K&wait=MS&hold=MS&ttl=MS: as /notified (polling would
-- sleep 10 s), and answers "acquired <core.now()> fence <fence>" (the
-- monotonic clock, which other processes share) after holding the lock.
function _M.fifo()
    local r = counter.redis
    local client = redlock.new { servers = { { host = r.host, port = r.port } }, retry_delay = 10000,
        retry_jitter = 0, wait = tonumber(ngx.var.arg_wait), ttl = tonumber(ngx.var.arg_ttl) or 10000 }
    local lock, err = client:acquire("lock:" .. ngx.var.arg_key)
    if not lock then return ngx.say(err) end
    local line = string.format("acquired %.3f fence %d", require("redlock.core").now(), lock.fence)
    ngx.sleep((tonumber(ngx.var.arg_hold) or 0) / 1000)
    local ok, rerr = lock:release()
    ngx.say(ok and line or tostring(rerr))
end

-- WATCH, GET, MULTI, SET, EXEC on one server, with sleeps between, as
-- legacy mode runs them: every step must reach the same connection.
local function transaction(server, key, value)
    local steps = { { "WATCH", key }, { "GET", key }, { "MULTI" }, { "SET", key, value }, { "EXEC" } }
    local replies = {}
    for i, step in ipairs(steps) do
        local r, err = server:call(unpack(step))
        if r == nil then return "step " .. i .. ": " .. tostring(err) end
        replies[i] = type(r) == "table" and ("{" .. concat(r, ",") .. "}") or tostring(r)
        ngx.sleep(0.01)
    end
    return concat(replies, " ")
end

--- GET /watch?key=K: two transactions at once (two light threads), and
-- the NOSCRIPT path: SCRIPT FLUSH, then a lock.
function _M.watch()
    local server = counter.client.servers[1]
    local key = ngx.var.arg_key
    local a = ngx.thread.spawn(transaction, server, key .. ":a", "va")
    local b = ngx.thread.spawn(transaction, server, key .. ":b", "vb")
    local _, ra = ngx.thread.wait(a)
    local _, rb = ngx.thread.wait(b)
    ngx.say("a=", ra)
    ngx.say("b=", rb)
    server:call("SCRIPT", "FLUSH")
    ngx.say("noscript=", outcome(counter.client:try_acquire(key .. ":lock")))
end

-- One try_acquire of key (held 60 s): says token=, or code= and err=.
local function say_try(c, key)
    local lock, err, code = c:try_acquire(key, { ttl = 60000 })
    if lock then
        ngx.say("token=", lock.token)
    else
        ngx.say("code=", code)
        ngx.say("err=", err)
    end
end

--- GET /auth?port=P&password=W&db=N&key=K: a client made in the request,
-- with AUTH and SELECT; holds lock K (60 s) and answers its token.
function _M.auth()
    local args = ngx.req.get_uri_args()
    local c = redlock.new { servers = { { host = counter.redis.host, port = tonumber(args.port),
        password = args.password, db = tonumber(args.db) } } }
    say_try(c, args.key)
end

-- The clients of /grant, per worker and fence option: kept across
-- requests, as a worker's client is.
local granting = {}

--- GET /grant?key=K&n=N[&fence=0][&port=P&user=U&password=W][&mode=M][&try=1]: N
-- uncontended locks on K:1 .. K:N (each taken and released) by this
-- worker's client (fence = false with fence=0; on port P as user U when
-- given); answers fences= (each lock's fence, "nil" without one). try=1:
-- one try_acquire of K instead, answering code= and err= (or token=).
function _M.grant()
    local args = ngx.req.get_uri_args()
    local fence = args.fence ~= "0"
    local id = concat({ tostring(fence), args.port or "", args.user or "", args.password or "", args.mode or "" },
        "\0")
    local c = granting[id]
    if not c then
        c = redlock.new { servers = { { host = counter.redis.host, port = tonumber(args.port) or counter.redis.port,
            username = args.user, password = args.password } }, fence = fence, mode = args.mode }
        granting[id] = c
    end
    if args.try then return say_try(c, args.key) end
    local fences = {}
    for i = 1, tonumber(args.n) do
        local lock, err, code = c:acquire(args.key .. ":" .. i)
        if not lock then
            ngx.say("code=", code)
            ngx.say("err=", err)
            return
        end
        fences[i] = tostring(lock.fence)
        local ok, rerr = lock:release()
        if not ok then
            ngx.say("err=", rerr)
            return
        end
    end
    ngx.say("fences=", concat(fences, " "))
end

-- A reader (as core.reader's) whose nth reply comes garbled: the reply
-- read, then bytes that no Redis sends in its place, which the reader
-- refuses from then on (a stream corrupted on its way).
local function garbling(nth)
    local rd, n = require("redlock.core").reader(), 0
    return {
        feed = function(_, data) return rd:feed(data) end,
        get = function(_, raw)
            if n >= nth then return rd:get(raw) end
            local v, msg, code = rd:get(raw)
            if v == false then return false end
            n = n + 1
            if n < nth then return v, msg, code end
            rd:feed("?garbled\r\n")
            return rd:get(raw)
        end,
    }
end

--- GET /garbled?key=K&port=P[&replicas=N]: a client's second lock, of K
-- on port P, whose request's second reply comes garbled (garbling): the
-- grant's XADD after its SET (the first lock ran the script), or, with N
-- replicas to wait for, WAIT after the acquire script. Answers
-- fence= (or code= and err=), then in_step= (the worker's next calls to
-- that server answered in order, or the first that was not).
function _M.garbled()
    local args = ngx.req.get_uri_args()
    local c = redlock.new { servers = { { host = counter.redis.host, port = tonumber(args.port) } },
        replicas = tonumber(args.replicas) or 0, replica_timeout = 1000 }
    local server = c.servers[1]
    -- (mode auto settled, the script loaded: the next request is SET and
    -- XADD, or the script and WAIT; it takes the last reader kept)
    assert(c:acquire(args.key .. ":warm")):release()
    server.readers[#server.readers + 1] = garbling(2)
    local lock, err, code = c:try_acquire(args.key)
    if lock then
        ngx.say("fence=", lock.fence)
        local ok, rerr = lock:release()
        ngx.say("release=", ok and "ok" or tostring(rerr))
    else
        ngx.say("code=", code)
        ngx.say("err=", err)
    end
    local step = "true"
    for i = 1, 5 do
        local v = args.key .. ":step:" .. i
        local set, serr = server:call("SET", args.key .. ":step", v)
        local got, gerr = server:call("GET", args.key .. ":step")
        if set ~= "OK" or got ~= v then
            step = string.format("%d: %s %s, %s %s", i, tostring(set), tostring(serr), tostring(got), tostring(gerr))
            break
        end
    end
    server:call("DEL", args.key .. ":step")
    ngx.say("in_step=", step)
    c:close()
end

-- The clients of /detect, per worker: kept across requests.
local detecting = {}

--- GET /detect?port=P&user=U&password=W&key=K: one acquire and release of K
-- by this worker's client of mode "auto" for that user; answers mode= (the
-- client's mode after it) and ok, or code= and err=.
function _M.detect()
    local args = ngx.req.get_uri_args()
    local id = concat({ args.port, args.user or "", args.password or "" }, "\0")
    local c = detecting[id]
    if not c then
        c = redlock.new { servers = { { host = counter.redis.host, port = tonumber(args.port),
            username = args.user, password = args.password } } }
        detecting[id] = c
    end
    local lock, err, code = c:acquire(args.key)
    if lock then
        local ok, rerr, rcode = lock:release()
        if ok then ngx.say("ok=true") else err, code = rerr, rcode end
    end
    if code then
        ngx.say("code=", code)
        ngx.say("err=", err)
    end
    ngx.say("mode=", tostring(c:mode()))
end

--- GET /tls?port=P&key=K[&cert=F&pkey=F][&name=N][&insecure=1]: a client
-- over TLS (cosockets: nginx's lua_ssl_trusted_certificate); holds lock K
-- (60 s) and answers its token, or code and err.
function _M.tls() -- (&plain=1: no TLS, a plain connection to that port)
    local args = ngx.req.get_uri_args()
    local c = redlock.new { servers = { { host = counter.redis.host, port = tonumber(args.port),
        tls = args.plain == nil and { cert_file = args.cert, key_file = args.pkey, server_name = args.name,
                verify = args.insecure == nil } or nil } } }
    say_try(c, args.key)
end

--- GET /tls_api?ports=P[,P...]&key=K&name=N&ca=F[&cert=F&pkey=F][&renew=1]: the lock
-- API over TLS through cosockets, on one server or Redlock over several:
-- each step's outcome as a line ("ok", the code, or the error). ca: for the
-- renewal thread (OpenSSL in C; nginx's own CAs serve the cosockets), as
-- with_lock runs fn for three ttls.
function _M.tls_api()
    local args = ngx.req.get_uri_args()
    local tls = { ca_file = args.ca, cert_file = args.cert, key_file = args.pkey, server_name = args.name }
    local servers = {}
    for p in args.ports:gmatch("%d+") do
        servers[#servers + 1] = { host = counter.redis.host, port = tonumber(p), tls = tls }
    end
    local c = redlock.new { servers = servers, retry_delay = 10, server_timeout = 1000 }
    local key, t = args.key, {}
    local function word(ok, err, code) return ok and "ok" or tostring(code or err) end
    local lock, err, code = c:acquire(key, { ttl = 5000 })
    t.acquire = word(lock, err, code)
    t.transport = c.servers[1].transport
    if lock then
        t.again = word(c:try_acquire(key))
        t.extend = word(lock:extend(8000))
        t.release = word(lock:release())
        t.release_again = word(lock:release())
    end
    -- "locked": another try while fn runs (renew=1: after three ttls, so
    -- only the renewal thread, over TLS in C, kept the lock)
    local ok, v = c:with_lock(key, { ttl = 300 }, function()
        if args.renew then ngx.sleep(0.9) end
        local _, oerr, ocode = c:try_acquire(key)
        return ocode or oerr
    end)
    t.with_lock = ok and tostring(v) or ("failed: " .. tostring(v))
    local free = c:try_acquire(key)
    t.after = free and "free" or "held"
    if free then free:release() end
    c:close()
    say_sorted(t)
end

--- GET /renew?key=K&ttl=T&ms=N: takes lock K with ttl T, renews it from
-- nginx timers while sleeping N ms, then says what it still had.
function _M.renew()
    local args = ngx.req.get_uri_args()
    local lock, err = counter.client:acquire(args.key, { ttl = tonumber(args.ttl) })
    if not lock then
        ngx.status = 503
        return ngx.say(err)
    end
    local lost = "no"
    local handle = assert(cosocket.renew(lock, { on_lost = function() lost = "yes" end }))
    _M.last_renewal = handle
    ngx.sleep(tonumber(args.ms) / 1000)
    ngx.say("remaining=", lock:remaining())
    local ok, rerr = lock:release()
    ngx.say("release=", ok and "ok" or rerr)
    ngx.say("on_lost=", lost)
    ngx.say("handle_lost=", tostring(handle.lost))
end

--- GET /renew_gone?key=K&ttl=T: takes lock K with ttl T, renews it from
-- nginx timers and ends without releasing it (its renewal must end with it).
function _M.renew_gone()
    local args = ngx.req.get_uri_args()
    local lock = assert(counter.client:acquire(args.key, { ttl = tonumber(args.ttl) }))
    _M.last_renewal = assert(cosocket.renew(lock))
    ngx.say("taken")
end

--- GET /replicas?ports=P1[,P2,P3]&key=K&n=N&ms=T[&aof=1]: a client over
-- those servers (one: single server; three: Redlock) that waits for N
-- replicas (replica_timeout T) takes lock K, extends it and releases it;
-- answers replicas= (lock.replicas), extend=, release=, or code and err.
function _M.replicas()
    local args = ngx.req.get_uri_args()
    local servers = {}
    for port in args.ports:gmatch("%d+") do
        servers[#servers + 1] = { host = counter.redis.host, port = tonumber(port) }
    end
    local c = redlock.new { servers = servers, replicas = tonumber(args.n),
        replica_timeout = tonumber(args.ms), aof = args.aof ~= nil, server_timeout = 500 }
    local lock, err, code = c:try_acquire(args.key)
    if not lock then
        ngx.say("code=", code)
        ngx.say("err=", err)
        return
    end
    ngx.say("replicas=", lock.replicas)
    local ok, eerr = lock:extend()
    ngx.say("extend=", ok and "ok" or eerr)
    ngx.say("extended_replicas=", lock.replicas)
    local rok, rerr = lock:release()
    ngx.say("release=", rok and "ok" or rerr)
end

--- GET /renewing: whether the last renewal of this worker still runs.
function _M.renewing()
    ngx.say("active=", tostring(_M.last_renewal and _M.last_renewal.active))
end

--- GET /sentinel?url=U&key=K[&n=N][&check=MS]: a client on U (redis+sentinel://;
-- check: the table form with that sentinel_check)
-- takes lock K N times (default once, released each time but the last,
-- held 60 s) over cosockets; answers the last token and where it was
-- taken, or code and err.
local sentinel_clients = {}
function _M.sentinel()
    local args = ngx.req.get_uri_args()
    local id = args.url .. "|" .. (args.check or "")
    local c = sentinel_clients[id]
    if not c then
        local server = args.url
        if args.check then -- the table form, with its sentinel_check
            server = require("redlock.addresses").parse_url(args.url)
            for i, s in ipairs(server.sentinels) do server.sentinels[i] = s.host .. ":" .. s.port end
            server.sentinel_check = tonumber(args.check)
        end
        c = redlock.new { servers = { server }, connect_timeout = 500 }
        sentinel_clients[id] = c
    end
    local n = tonumber(args.n) or 1
    for i = 1, n do
        local lock, err, code = c:try_acquire(args.key, { ttl = 60000 })
        if not lock then
            ngx.say("code=", code)
            ngx.say("err=", err)
            return
        end
        if i == n then
            ngx.say("token=", lock.token)
            ngx.say("master=", c.servers[1].sentinel.host, ":", c.servers[1].sentinel.port)
        else
            lock:release()
        end
    end
end

--- GET /sentinel_shared?url=U&key=K&check=C: what a worker that reads the
-- master's address from the shared dict (lua_shared_dict redlock_sentinel)
-- takes as the time it was checked. One client asks the sentinels of U
-- (sentinel_check C) and takes K; a second client of the same sentinels,
-- with no address of its own (as another worker's), takes K..":2" 0.6 C
-- later. Answers second=: the time the second client counts its address
-- checked at, in ms after the first one's; mine= the token the second
-- client held K..":2" with (both released before the answer).
function _M.sentinel_shared()
    local args = ngx.req.get_uri_args()
    local function client()
        local server = require("redlock.addresses").parse_url(args.url)
        for i, s in ipairs(server.sentinels) do server.sentinels[i] = s.host .. ":" .. s.port end
        server.sentinel_check = tonumber(args.check)
        return redlock.new { servers = { server }, connect_timeout = 500 }
    end
    -- (no worker knows the address: earlier tests' clients shared theirs)
    ngx.shared.redlock_sentinel:flush_all()
    local a, b = client(), client()
    local la = assert(a:try_acquire(args.key, { ttl = 60000 }))
    local first = a.servers[1].sentinel.checked
    ngx.sleep(0.6 * tonumber(args.check) / 1000)
    local lb = assert(b:try_acquire(args.key .. ":2", { ttl = 60000 }))
    ngx.say("second=", string.format("%d", b.servers[1].sentinel.checked - first))
    ngx.say("mine=", lb.token)
    la:release()
    lb:release()
    a:close()
    b:close()
end

--- GET /legacy_switch?url=U&key=K&flag=F: in legacy mode on the master
-- that the sentinels of U name (MULTI renamed away there: the bare
-- recipe), takes K (held 60 s) and releases it, pausing the release after
-- its first step (GET): F, on the example's Redis, says "paused", and the
-- release goes on once F says "go" and this worker names another master.
-- Answers release= (ok, or the code) and err=.
function _M.legacy_switch()
    local args = ngx.req.get_uri_args()
    local c = redlock.new { servers = { args.url }, mode = "legacy", connect_timeout = 500 }
    local lock, err, code = c:acquire(args.key, { ttl = 60000 })
    if not lock then
        ngx.say("acquire=", code)
        ngx.say("err=", err)
        return
    end
    local server = c.servers[1]
    local ngx_sentinel = require "redlock.nginx.sentinel"
    local _, old = ngx_sentinel.address(server)
    local call = server.call
    server.call = function(self, ...)
        local r, e, cd = call(self, ...)
        if (...) == "GET" then
            store.command(counter.redis, "SET", args.flag, "paused")
            local deadline = ngx.now() + 60
            while store.command(counter.redis, "GET", args.flag) ~= "go" and ngx.now() < deadline do
                ngx.sleep(0.05)
            end
            -- (the sentinels asked afresh: a step on a new connection goes to the new master)
            repeat
                ngx_sentinel.forget(server)
                local _, port = ngx_sentinel.address(server)
                if port == old then ngx.sleep(0.05) end
            until port ~= old or ngx.now() > deadline
        end
        return r, e, cd
    end
    local ok, rerr, rcode = lock:release()
    server.call = nil
    ngx.say("release=", ok and "ok" or tostring(rcode or ok))
    ngx.say("err=", tostring(rerr))
    c:close()
end

--- Redis Cluster clients, one per worker and seed list (and members:
-- the ports of plain servers that join it in a Redlock quorum).
local cluster_clients = {}
local function cluster_client(args)
    local id = args.url .. "|" .. (args.members or "")
    local c = cluster_clients[id]
    if not c then
        local servers = { args.url }
        for port in (args.members or ""):gmatch("%d+") do
            servers[#servers + 1] = { host = counter.redis.host, port = tonumber(port) }
        end
        -- (server_timeout: as for _M.redlock, see init)
        c = redlock.new { servers = servers, ttl = 5000, wait = 20000, retry_delay = 5, retry_jitter = 5,
            connect_timeout = 300, server_timeout = 1000 }
        cluster_clients[id] = c
    end
    return c
end

--- GET /cluster_incr?url=U&key=K[&members=P1,P2][&ms=N]: /incr on a
-- Cluster: the counter K (GET and SET through the client's Cluster server,
-- routed by slot) under the lock lock:K, with N ms (default 1) between the
-- read and the write; with members, Redlock over the Cluster and those
-- servers.
function _M.cluster_incr()
    local args = ngx.req.get_uri_args()
    local c = cluster_client(args)
    local server, key = c.servers[1], args.key
    local ok, value, code = c:with_lock("lock:" .. key, function()
        local v = assert(server:call("GET", key))
        v = (v == ngx.null) and 0 or tonumber(v)
        ngx.sleep((tonumber(args.ms) or 1) / 1000)
        assert(server:call("SET", key, v + 1))
        return v + 1
    end)
    if not ok then ngx.status = (code == "timeout" or code == "locked") and 503 or 502 end
    ngx.say(value)
end

--- GET /cluster_try?url=U&key=K[&replicas=N]: one try_acquire (held 60 s) on
-- a Cluster; answers token=, or code= and err=.
function _M.cluster_try()
    local args = ngx.req.get_uri_args()
    local c = redlock.new { servers = { args.url }, connect_timeout = 300, replicas = tonumber(args.replicas),
        replica_timeout = 100 }
    say_try(c, args.key)
end

--- GET /cluster_notified?url=U&key=K&wait=MS[&check=MS]: /notified on a
-- Cluster (the worker's subscriber listens on one node, whichever the
-- key's) or a Sentinel URL (check: its sentinel_check; the worker listens
-- for +switch-master before the acquire starts).
function _M.cluster_notified()
    local args = ngx.req.get_uri_args()
    local server = args.url
    if args.check then -- the table form, with its sentinel_check
        server = require("redlock.addresses").parse_url(args.url)
        for i, s in ipairs(server.sentinels) do server.sentinels[i] = s.host .. ":" .. s.port end
        server.sentinel_check = tonumber(args.check)
    end
    local client = redlock.new { servers = { server }, retry_delay = 10000, retry_jitter = 0,
        wait = tonumber(args.wait) }
    local st = client.servers[1].sentinel
    if st then
        -- (this worker listens for +switch-master before it waits: a
        -- failover announced earlier would reach it by sentinel_check only)
        require("redlock.nginx.sentinel").address(client.servers[1])
        for _ = 1, 500 do
            if st.watch.listening then break end
            ngx.sleep(0.02)
        end
    end
    local lock, err = client:acquire(args.key)
    if not lock then return ngx.say(err) end
    lock:release()
    ngx.say("taken")
end

--- set_by_lua: GET /cluster_set?url=U&key=K: where nginx has no cosockets,
-- a lock on a Cluster over the C core's connection (held 60 s); answers
-- the token and the phase, or the error.
function _M.cluster_set()
    local args = ngx.req.get_uri_args()
    local c = redlock.new { servers = { args.url }, connect_timeout = 300 }
    local lock, err = c:try_acquire(args.key, { ttl = 60000 })
    c:close()
    if not lock then return "err=" .. tostring(err) end
    return "token=" .. lock.token .. "\nphase=" .. ngx.get_phase()
end

return _M
