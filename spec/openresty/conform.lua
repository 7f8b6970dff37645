--- Test-only handler that spec/conformance_cases.lua loads into nginx: the
-- conformance suite's nginx driver. One location, /conform, runs one lock
-- operation over cosockets (redlock.cosocket: lua/redlock/nginx/) and
-- answers "name=value" lines: token= (or ok=) on success, code= and err= on
-- failure. The locks it takes stay in this worker (run it with one worker)
-- until a later request extends or releases them.
local redlock = require "redlock"
local cosocket = require "redlock.cosocket"

local ngx = ngx
local tonumber, tostring = tonumber, tostring

local _M = {}

-- Clients by the test's id, kept in the worker: what a client knows of its
-- topology (the master's address) stays for its next request, as in a real
-- worker. (A Cluster's slot map is the worker's, shared by every client
-- with the same seeds: redlock.nginx.cluster.)
local clients = {}
-- Locks taken, by key.
local held = {}
-- Their renewals from nginx timers (op=hold), by key.
local renewals = {}

-- The server of url (check: how often a Sentinel master is checked, as
-- spec/conformance.lua's server_of), and a client of it with the case's
-- replica acknowledgement.
local function client_for(id, url, args)
    local c = clients[id]
    if not c then
        local server = url
        if args.check then
            local addrs, name = url:match("^redis%+sentinel://([^/]+)/(.+)$")
            local sentinels = {}
            for a in addrs:gmatch("[^,]+") do sentinels[#sentinels + 1] = a end
            server = { sentinels = sentinels, master_name = name, sentinel_check = tonumber(args.check) }
        end
        -- (as spec/conformance.lua makes the other drivers' clients)
        c = redlock.new { servers = { server }, retry_delay = 5, retry_jitter = 0, server_backoff = 0,
            replicas = tonumber(args.replicas), replica_timeout = tonumber(args.replica_timeout) }
        clients[id] = c
    end
    return c
end

local function fail(err, code)
    ngx.say("code=", tostring(code))
    ngx.say("err=", tostring(err))
end

-- op=hold: acquire, then renew from nginx timers (redlock.cosocket.renew),
-- detached from this request (the lock outlives it, as the test holds it
-- across its event); warm: wait until one renewal was made.
local function hold(args)
    local key, ttl = args.key, tonumber(args.ttl)
    local lock, err, code = client_for(args.client, args.url, args):acquire(key, { ttl = ttl })
    if not lock then return fail(err, code) end
    held[key] = lock
    local handle, rerr = cosocket.renew(lock, { detached = true, max_hold = 120000 })
    if not handle then return fail(rerr, "test") end
    renewals[key] = handle
    if args.warm then
        -- (each renewal moves the lock's validity end)
        local taken, till = lock.expires, ngx.now() + ttl / 1000
        while lock.expires == taken and handle.active and ngx.now() < till do ngx.sleep(0.01) end
        if lock.expires == taken then return fail("no renewal within a ttl: " .. tostring(handle.err), "test") end
    end
    ngx.say("token=", lock.token)
    ngx.say("transport=", lock.client.servers[1].transport)
end

-- op=observe: whether the renewal of op=hold kept the lock, as its handle
-- says (held=), and whether lock:lost() says the same (agree=).
local function observe(key)
    local lock, handle = held[key], renewals[key]
    if not lock or not handle then return fail("no renewed lock on " .. tostring(key), "test") end
    local lost, why = lock:lost()
    local kept = handle.active and not handle.lost
    ngx.say("held=", tostring(kept))
    ngx.say("agree=", tostring(kept == not lost))
    if lost then ngx.say("why=", why) end
    if handle.err then ngx.say("err=", handle.err) end
end

--- GET /conform?op=acquire&client=ID&url=U&key=K&ttl=T: one try_acquire of K
-- with client ID (made on its first request, for servers = { U }).
-- op=extend&key=K&ttl=T, op=release&key=K: on the lock taken before.
-- op=hold&client=ID&url=U&key=K&ttl=T[&warm=1]: K taken and renewed from
-- timers; op=observe&key=K: whether that renewal kept it.
function _M.run()
    local args = ngx.req.get_uri_args()
    local op, key = args.op, args.key
    if op == "hold" then return hold(args) end
    if op == "observe" then return observe(key) end
    if op == "acquire" then
        local lock, err, code = client_for(args.client, args.url, args):try_acquire(key,
            { ttl = tonumber(args.ttl) })
        if not lock then return fail(err, code) end
        held[key] = lock
        ngx.say("token=", lock.token)
        ngx.say("transport=", lock.client.servers[1].transport)
        return
    end
    local lock = held[key]
    if not lock then return fail("no lock held on " .. tostring(key), "test") end
    local ok, err, code
    if op == "extend" then
        ok, err, code = lock:extend(tonumber(args.ttl))
    else
        ok, err, code = lock:release()
        held[key], renewals[key] = nil, nil
    end
    if not ok then return fail(err, code) end
    ngx.say("ok=true")
end

return _M
