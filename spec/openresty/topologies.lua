--- Test-only handlers that spec/42-openresty_topologies_spec.lua loads into
-- nginx: a Cluster over TLS through cosockets (and through the C core where
-- nginx has none), and a Redlock renewed from nginx timers
-- (redlock.cosocket.renew). Answers are "name=value" lines.
local redlock = require "redlock"
local cosocket = require "redlock.cosocket"

local ngx = ngx
local tostring, tonumber, pairs, ipairs, sort = tostring, tonumber, pairs, ipairs, table.sort

local _M = {}

local function say_sorted(t)
    local keys = {}
    for k in pairs(t) do keys[#keys + 1] = k end
    sort(keys)
    for _, k in ipairs(keys) do ngx.say(k, "=", tostring(t[k])) end
end

local function word(ok, err, code)
    if ok then return "ok" end
    return tostring(code or err)
end

-- The TLS Cluster's server table: nginx checks a certificate's DNS names
-- only (never an IP address), so every node is checked under server_name
-- (the test certificate's localhost); ca_file serves the C core (the
-- blocking phases, the renewal thread): nginx's CAs are
-- lua_ssl_trusted_certificate.
local function cluster_server(args)
    local seeds = {}
    for seed in args.seeds:gmatch("[^,]+") do seeds[#seeds + 1] = seed end
    return { cluster = seeds, tls = { server_name = "localhost", ca_file = args.ca } }
end

-- Clients by seeds and members (the ports of plain servers that join the
-- Cluster in a Redlock), kept in the worker as a real worker keeps them.
local clients = {}
local function client_for(args)
    local id = args.seeds .. "|" .. (args.members or "")
    local c = clients[id]
    if not c then
        local servers = { cluster_server(args) }
        for port in (args.members or ""):gmatch("%d+") do
            servers[#servers + 1] = { host = "127.0.0.1", port = tonumber(port) }
        end
        c = redlock.new { servers = servers, retry_delay = 5, retry_jitter = 0, server_timeout = 1000,
            connect_timeout = 1000 }
        clients[id] = c
    end
    return c
end

-- Locks taken by /cluster_tls?op=try, by key, until op=release.
local held = {}

--- GET /cluster_tls?op=...&seeds=H:P,H:P&ca=F&key=K[&members=P,P]
--   op=try: one try_acquire of K (ttl 60 s), held in the worker; answers
--     token= and transport=, or code= and err=
--   op=extend, op=release: of the lock taken by op=try
--   op=api: acquire, a second try (locked), extend, release, release again
--     (not owner); then with_lock (ttl 300) around 900 ms of work, renewed
--     by the C core's thread over TLS, and a try from inside (locked);
--     then the same 900 ms renewed from nginx timers instead; after each,
--     whether the key is free
--   op=wait&wait=MS: acquire with a client whose polling would sleep 10 s
--     (retry_delay): only a wake-up by the worker's subscriber (TLS to a
--     node) takes it within MS; answers taken, or the error
function _M.cluster_tls()
    local args = ngx.req.get_uri_args()
    local op, key = args.op, args.key
    if op == "try" then
        local c = client_for(args)
        local lock, err, code = c:try_acquire(key, { ttl = 60000 })
        if not lock then return say_sorted { code = code, err = err } end
        held[key] = lock
        return say_sorted { token = lock.token, transport = c.servers[1].transport }
    elseif op == "extend" or op == "release" then
        local lock = held[key]
        if op == "release" then held[key] = nil end
        return say_sorted { [op] = word(lock[op](lock, op == "extend" and 60000 or nil)) }
    elseif op == "api" then
        local c = client_for(args)
        local t = {}
        local lock, err, code = c:acquire(key, { ttl = 5000 })
        t.acquire = word(lock, err, code)
        t.transport = c.servers[1].transport
        if lock then
            t.again = word(c:try_acquire(key))
            t.extend = word(lock:extend(8000))
            t.release = word(lock:release())
            t.release_again = word(lock:release())
        end
        -- three ttls: only a renewal kept the lock meanwhile
        local ok, v = c:with_lock(key, { ttl = 300 }, function()
            ngx.sleep(0.9)
            return word(c:try_acquire(key))
        end)
        t.with_lock = ok and v or ("failed: " .. tostring(v))
        local free = c:try_acquire(key)
        t.after = free and "free" or "held"
        if free then free:release() end
        lock, err, code = c:acquire(key, { ttl = 300 })
        if lock then
            local handle = assert(cosocket.renew(lock))
            ngx.sleep(0.9)
            t.timers = word(c:try_acquire(key))
            t.timers_release = word(lock:release())
            t.timers_lost = tostring(handle.lost)
        else
            t.timers = word(nil, err, code)
        end
        free = c:try_acquire(key)
        t.timers_after = free and "free" or "held"
        if free then free:release() end
        return say_sorted(t)
    elseif op == "wait" then
        local c = redlock.new { servers = { cluster_server(args) }, retry_delay = 10000, retry_jitter = 0,
            wait = tonumber(args.wait) }
        local lock, err = c:acquire(key)
        if not lock then return ngx.say(err) end
        lock:release()
        return ngx.say("taken")
    end
    ngx.status = 400
    ngx.say("unknown op")
end

--- set_by_lua: GET /cluster_tls_set?seeds=...&ca=F&key=K: where nginx has no
-- cosockets, a lock on the Cluster over the C core's TLS connections (held
-- 60 s); answers the token and the phase, or the error.
function _M.cluster_tls_set()
    local args = ngx.req.get_uri_args()
    local c = redlock.new { servers = { cluster_server(args) }, connect_timeout = 1000 }
    local lock, err = c:try_acquire(args.key, { ttl = 60000 })
    c:close()
    if not lock then return "err=" .. tostring(err) end
    return "token=" .. lock.token .. "\nphase=" .. ngx.get_phase()
end

-- The last renewal this worker started, and its lock.
local last = {}

-- A Redlock client over the plain servers on ports (one per list).
local redlocks = {}
local function redlock_for(ports)
    local c = redlocks[ports]
    if not c then
        local servers = {}
        for port in ports:gmatch("%d+") do servers[#servers + 1] = { host = "127.0.0.1", port = tonumber(port) } end
        -- server_timeout: each extend within a loaded test host's means
        c = redlock.new { servers = servers, server_timeout = 200, retry_delay = 5 }
        redlocks[ports] = c
    end
    return c
end

--- GET /redlock_renew?ports=P,P,P&key=K&ttl=T&ms=N: takes Redlock lock K
-- (ttl T) and renews it from nginx timers for up to N ms, until the
-- renewal says the lock is lost; then releases it. Answers what came out:
-- lost (the handle's), on_lost (opts.on_lost ran), lock_lost (lock:lost()'s
-- reason), remaining, err (the handle's), release.
-- &gone=1: returns at once without releasing (the renewal must end with
-- the request).
function _M.redlock_renew()
    local args = ngx.req.get_uri_args()
    local c = redlock_for(args.ports)
    local lock, err, code = c:acquire(args.key, { ttl = tonumber(args.ttl) })
    if not lock then return say_sorted { code = code, err = err } end
    local lost_cb = "no"
    local handle = assert(cosocket.renew(lock, { on_lost = function() lost_cb = "yes" end }))
    last.handle, last.lock = handle, lock
    if args.gone then return ngx.say("taken") end
    local till = ngx.now() + tonumber(args.ms) / 1000
    while handle.active and ngx.now() < till do ngx.sleep(0.02) end
    local is_lost, why = lock:lost()
    local t = { lost = tostring(handle.lost), on_lost = lost_cb, lock_lost = is_lost and why or "no",
        remaining = lock:remaining(), err = tostring(handle.err) }
    local ok, rerr, rcode = lock:release()
    t.release = word(ok, rerr, rcode)
    return say_sorted(t)
end

--- GET /renewal: the last renewal of this worker: active, lost, err, and
-- whether its lock says it is lost.
function _M.renewal()
    local h, lock = last.handle, last.lock
    if not h then return ngx.say("none") end
    local is_lost, why = lock:lost()
    say_sorted { active = tostring(h.active), lost = tostring(h.lost), err = tostring(h.err),
        lock_lost = is_lost and why or "no" }
end

return _M
