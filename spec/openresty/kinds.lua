--- Test-only handlers that spec/36-kinds_openresty_spec.lua loads into
-- nginx: semaphores and group locks over cosockets.
local redlock = require "redlock"
local counter = require "counter"

local ngx = ngx
local tonumber, tostring, ipairs, select = tonumber, tostring, ipairs, select
local unpack = table.unpack or unpack -- luacheck: ignore 143

local _M = {}

local clients = {}

-- One client per worker and retry_delay, made in the first request.
local function client(retry_delay)
    local c = clients[retry_delay]
    if not c then
        local r = counter.redis
        c = redlock.new { servers = { { host = r.host, port = r.port } }, ttl = 5000, wait = 20000,
            retry_delay = retry_delay, retry_jitter = retry_delay }
        clients[retry_delay] = c
    end
    return c
end

local function call(...)
    local c = client(5)
    return assert(c.servers[1]:call(...))
end

--- GET /sem?key=K&limit=N&ms=MS: with_lock of a semaphore; inside, INCR
-- K:inside, ngx.sleep(ms), DECR it. Answers how many were inside on entry.
function _M.sem()
    local key, limit, ms = ngx.var.arg_key, tonumber(ngx.var.arg_limit), tonumber(ngx.var.arg_ms) or 10
    local ok, v, code = client(5):with_lock(key, { limit = limit }, function(p)
        assert(p.limit == limit and p.fence)
        local n = call("INCR", key .. ":inside")
        ngx.sleep(ms / 1000)
        call("DECR", key .. ":inside")
        return n
    end)
    if not ok then ngx.status = code == "timeout" and 503 or 502 end
    ngx.say(tostring(v))
end

--- GET /sem_wait?key=K&wait=MS&hold=MS: waits for a permit of a semaphore
-- of limit 1 with a client whose polling would sleep 10 s: only a wake-up
-- from the worker's subscriber makes it try before its wait is over.
function _M.sem_wait()
    local c = client(10000)
    local p, err = c:acquire(ngx.var.arg_key, { limit = 1, wait = tonumber(ngx.var.arg_wait) })
    if not p then return ngx.say(err) end
    ngx.sleep((tonumber(ngx.var.arg_hold) or 0) / 1000)
    p:release()
    ngx.say("taken")
end

--- GET /sem_hold?key=K&ms=MS: holds a permit of limit 1 for ms, releases.
function _M.sem_hold()
    local p, err = client(5):acquire(ngx.var.arg_key, { limit = 1 })
    if not p then return ngx.say(err) end
    ngx.sleep(tonumber(ngx.var.arg_ms) / 1000)
    local ok, rerr = p:release()
    ngx.say(ok and "released" or rerr)
end

--- GET /rw?key=K&role=r|w&ms=MS: with_lock as a reader (role r, shared)
-- or a writer; inside, INCR its role's counter, check the other's, sleep,
-- DECR. Answers the readers inside on entry, or "overlap".
function _M.rw()
    local key, reader, ms = ngx.var.arg_key, ngx.var.arg_role == "r", tonumber(ngx.var.arg_ms) or 10
    local ok, v, code = client(5):with_lock(key, { shared = reader }, function()
        local mine, other = key .. (reader and ":readers" or ":writers"), key .. (reader and ":writers" or ":readers")
        local n = call("INCR", mine)
        local bad = (tonumber(call("GET", other)) or 0) > 0 or (not reader and n ~= 1)
        ngx.sleep(ms / 1000)
        call("DECR", mine)
        return bad and "overlap" or n
    end)
    if not ok then ngx.status = code == "timeout" and 503 or 502 end
    ngx.say(tostring(v))
end

--- GET /kfifo?key=K&kind=limit|shared|writer&limit=N&wait=MS&hold=MS&ttl=MS&timeout=MS:
-- acquires K as a permit (kind limit, of limit N), a reader (shared) or a
-- writer, with a client whose polling would sleep 10 s; holds it hold ms,
-- releases, and answers "acquired <core.now() when taken> fence <fence>".
function _M.kfifo()
    local r, kind = counter.redis, ngx.var.arg_kind
    local c = redlock.new { servers = { { host = r.host, port = r.port } }, retry_delay = 10000,
        retry_jitter = 0, wait = tonumber(ngx.var.arg_wait), ttl = tonumber(ngx.var.arg_ttl) or 10000,
        timeout = tonumber(ngx.var.arg_timeout) }
    local lock, err = c:acquire(ngx.var.arg_key, {
        limit = kind == "limit" and tonumber(ngx.var.arg_limit) or nil, shared = kind == "shared" })
    if not lock then
        c:close()
        return ngx.say(err)
    end
    local line = string.format("acquired %.3f fence %d", require("redlock.core").now(), lock.fence)
    ngx.sleep((tonumber(ngx.var.arg_hold) or 0) / 1000)
    local ok, rerr = lock:release()
    c:close()
    ngx.say(ok and line or tostring(rerr))
end

--- GET /kfifo_close?key=K&kind=...&n=N (as /kfifo): the acquire waits in
-- a light thread; once N waiters are in K's queue and it waits among them,
-- the request closes its client and ends (ngx.exit), as a request's cleanup
-- would: what a release hands it must pass on all the same.
function _M.kfifo_close()
    local r, kind, key = counter.redis, ngx.var.arg_kind, ngx.var.arg_key
    local c = redlock.new { servers = { { host = r.host, port = r.port } }, retry_delay = 10000,
        retry_jitter = 0, wait = tonumber(ngx.var.arg_wait), ttl = tonumber(ngx.var.arg_ttl) or 10000 }
    ngx.thread.spawn(function()
        return c:acquire(key, { limit = kind == "limit" and tonumber(ngx.var.arg_limit) or nil,
            shared = kind == "shared" })
    end)
    while call("ZCARD", "{" .. key .. "}:waiters") < tonumber(ngx.var.arg_n) do ngx.sleep(0.01) end
    ngx.sleep(0.05) -- (its refusal's answer read: it waits)
    c:close()
    ngx.say("closed")
    ngx.exit(200)
end

--- GET /kfifo_end?key=K&kind=...&n=N[&entry=1] (as /kfifo): the acquire
-- waits in a light thread (entry: in the request's own thread, another
-- light thread ending it); once N waiters are in K's queue, the request
-- ends (ngx.exit) during the waiter's next attempt: sent to Redis, its
-- answer not read. Answers "ended <the waiter's token>".
function _M.kfifo_end()
    local r, kind, key = counter.redis, ngx.var.arg_kind, ngx.var.arg_key
    local c = redlock.new { servers = { { host = r.host, port = r.port } }, retry_delay = 10000,
        retry_jitter = 0, wait = tonumber(ngx.var.arg_wait), ttl = tonumber(ngx.var.arg_ttl) or 10000 }
    -- the attempts (the acquire scripts: eval_values), watched
    local conn = c.servers[1].conn
    local attempt, armed, sent, token = conn.eval_values, false, require("ngx.semaphore").new(), nil
    conn.eval_values = function(self, name, nkeys, ...)
        if armed then
            armed, token = false, select(nkeys + 1, ...) -- (ARGV[1])
            sent:post(1) -- (the request ends once this thread has sent it and yields)
        end
        return attempt(self, name, nkeys, ...)
    end
    local function waiter()
        return c:acquire(key, { limit = kind == "limit" and tonumber(ngx.var.arg_limit) or nil,
            shared = kind == "shared" })
    end
    local function ender()
        while call("ZCARD", "{" .. key .. "}:waiters") < tonumber(ngx.var.arg_n) do ngx.sleep(0.01) end
        armed = true
        assert(sent:wait(10))
        ngx.say("ended ", token)
        ngx.exit(200)
    end
    if ngx.var.arg_entry then
        ngx.thread.spawn(ender)
        waiter()
        ngx.say("not ended")
    else
        ngx.thread.spawn(waiter)
        ender()
    end
end

--- GET /kfifo_slow?key=K&kind=...&n=N&ms=MS (as /kfifo, holding nothing):
-- once N waiters are in K's queue, the waiter's next attempt, answered,
-- is followed by MS ms of ngx.sleep (a slow call to Redis, as the worker's
-- subscriber sees it), with K:slow set to 1 meanwhile.
function _M.kfifo_slow()
    local r, kind, key = counter.redis, ngx.var.arg_kind, ngx.var.arg_key
    local c = redlock.new { servers = { { host = r.host, port = r.port } }, retry_delay = 10000,
        retry_jitter = 0, wait = tonumber(ngx.var.arg_wait) }
    local conn = c.servers[1].conn
    local attempt, slowed = conn.eval_values, false
    local function pack(...) return { n = select("#", ...), ... } end
    conn.eval_values = function(self, name, nkeys, ...)
        local v = pack(attempt(self, name, nkeys, ...))
        if not slowed and call("ZCARD", "{" .. key .. "}:waiters") >= tonumber(ngx.var.arg_n) then
            slowed = true
            call("SET", key .. ":slow", 1)
            ngx.sleep(tonumber(ngx.var.arg_ms) / 1000)
            call("DEL", key .. ":slow")
        end
        return unpack(v, 1, v.n)
    end
    local lock, err = c:acquire(key, { limit = kind == "limit" and tonumber(ngx.var.arg_limit) or nil,
        shared = kind == "shared" })
    if not lock then
        c:close()
        return ngx.say(err)
    end
    local line = string.format("acquired %.3f fence %d", require("redlock.core").now(), lock.fence)
    local ok, rerr = lock:release()
    c:close()
    ngx.say(ok and line or tostring(rerr))
end

--- GET /pair?a=K1&b=K2: a group lock of the two keys; inside, each key's
-- counter (K:counter) read, a yield, written + 1.
function _M.pair()
    local keys = { ngx.var.arg_a, ngx.var.arg_b }
    local ok, err, code = client(2):with_lock(keys, function(g)
        assert(g.fences[keys[1]] and g.fences[keys[2]])
        for _, k in ipairs(keys) do
            local v = call("GET", k .. ":counter")
            v = (v == ngx.null) and 0 or tonumber(v)
            ngx.sleep(0.001)
            call("SET", k .. ":counter", v + 1)
        end
        return "ok"
    end)
    if not ok then ngx.status = code == "timeout" and 503 or 502 end
    ngx.say(tostring(err))
end

--- GET /hook_yield?key=K: acquires K (a waiter: K is held) with an
-- on_event hook that, on "acquired", runs the collector and then yields
-- (ngx.sleep) until K:go is set (at most 25 s: a busy machine). Answers "remaining <ms>
-- mine <whether K holds its token>".
function _M.hook_yield()
    local r, key = counter.redis, ngx.var.arg_key
    local c = redlock.new { servers = { { host = r.host, port = r.port } }, retry_delay = 10000,
        retry_jitter = 0, wait = 20000, ttl = 30000 }
    local server = c.servers[1]
    local lock, err = c:acquire(key, { on_event = function(ev)
        if ev.type ~= "acquired" then return end
        collectgarbage()
        collectgarbage()
        for _ = 1, 500 do
            if server:call("GET", key .. ":go") == "1" then break end
            ngx.sleep(0.05)
        end
    end })
    if not lock then
        c:close()
        return ngx.say(err)
    end
    local v = server:call("GET", key)
    ngx.say(string.format("remaining %d mine %s", lock:remaining(), tostring(v == lock.token)))
    lock:release()
    c:close()
end

return _M
