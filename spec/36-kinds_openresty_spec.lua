-- Semaphores, readers and writers, and group locks inside nginx (Debian's nginx with the Lua
-- module), over cosockets: the same API as plain Lua. Needs the core built
-- for LuaJIT (`make build-jit`); runs in the Lua 5.4 suite only, as
-- spec/41 does.
local helper = require "helper"
local core = require "redlock.core"
local nginx = require "openresty.nginx"

local missing = nginx.missing()

local SERVER = [[
        location = /sem { content_by_lua_block { require("kinds").sem() } }
        location = /sem_wait { content_by_lua_block { require("kinds").sem_wait() } }
        location = /sem_hold { content_by_lua_block { require("kinds").sem_hold() } }
        location = /pair { content_by_lua_block { require("kinds").pair() } }
        location = /rw { content_by_lua_block { require("kinds").rw() } }]]

describe("semaphores and group locks inside nginx", function()
    -- (the kinds\' scripts read the server\'s clock: Redis 3.2+)
    local it = helper.needing(it, "script_time")
    if missing then
        pending("skipped: " .. missing)
        return
    end
    local redis, data, ngx_server
    setup(function()
        assert(io.open("build/jit/redlock/core.so"), "build/jit/redlock/core.so is missing: run `make build-jit`")
            :close()
        redis = helper.start_server()
        data = core.conn(redis:spec())
        ngx_server = nginx.start { workers = 4, redis = redis, server = SERVER,
            lua_path = "@REPO@/spec/openresty/?.lua;" }
    end)
    teardown(function()
        if ngx_server then ngx_server:stop() end
        if data then data:close() end
        helper.stop_all()
    end)

    -- n requests to url_of(i), 16 at a time; returns their bodies
    local function requests(n, url_of)
        local paths = {}
        for i = 1, n do paths[i] = url_of(i) end
        local codes, bodies = ngx_server:parallel(paths, 16)
        for i = 1, n do
            local body = (bodies[i] or ""):gsub("%s+$", "")
            assert.equal("200", codes[i], "request " .. i .. " answered: " .. body)
            bodies[i] = body
        end
        return bodies
    end

    it("limit 3 over 4 workers: 60 requests, never more than 3 inside, more than 1 seen", function()
        local key = helper.key("sem")
        local most = 0
        for _, body in ipairs(requests(60, function() return "/sem?key=" .. key .. "&limit=3&ms=20" end)) do
            most = math.max(most, tonumber(body))
        end
        assert.is_true(most <= 3, "inside at once: " .. most)
        assert.is_true(most > 1, "never more than one inside")
        assert.equal("0", data:command("GET", key .. ":inside"))
        assert.equal(0, data:command("EXISTS", key))
        assert.same({}, ngx_server:errors())
    end)

    it("a permit given back wakes a waiting request through the worker's subscriber", function()
        local key = helper.key("sem")
        local holder = ngx_server:bg("/sem_hold?key=" .. key .. "&ms=1500")
        assert(helper.eventually(5000, function() return data:command("EXISTS", key) == 1 end))
        -- the worker's first waiter starts its subscriber
        local body = ngx_server:get("/sem_wait?key=" .. key .. "&wait=50")
        assert.matches("^timeout", body)
        -- polling would sleep 10 s: only the release's wake-up lets it in
        local waiter = ngx_server:bg("/sem_wait?key=" .. key .. "&wait=5000&hold=1500")
        assert.equal("released", (holder.wait()))
        assert(helper.eventually(1000, function() return data:command("EXISTS", key) == 1 end))
        assert.equal("taken", (waiter.wait()))
        assert.same({}, ngx_server:errors())
    end)

    it("readers and writers over 4 workers: readers overlap, a writer never overlaps anyone", function()
        local key = helper.key("rw")
        local most = 0
        for _, body in ipairs(requests(80, function(i)
            return "/rw?key=" .. key .. "&role=" .. (i % 8 == 0 and "w" or "r") .. "&ms=15"
        end)) do
            assert.not_equal("overlap", body)
            most = math.max(most, tonumber(body))
        end
        assert.is_true(most > 1, "readers never overlapped")
        assert.equal(0, data:command("EXISTS", key))
        assert.same({}, ngx_server:errors())
    end)

    it("group locks: 100 requests on random pairs of 4 keys lose no update", function()
        local keys = {}
        for i = 1, 4 do keys[i] = helper.key("g" .. i) end
        local seed = tonumber(core.token():sub(1, 6), 16)
        local times, pairs_of = {}, {}
        for i = 1, 100 do
            local a = (seed + i * 7) % 4 + 1
            local b = (a + (i % 3)) % 4 + 1
            pairs_of[i] = { keys[a], keys[b] }
            times[a] = (times[a] or 0) + 1
            times[b] = (times[b] or 0) + 1
        end
        for _, body in ipairs(requests(100, function(i)
            return "/pair?a=" .. pairs_of[i][1] .. "&b=" .. pairs_of[i][2]
        end)) do
            assert.equal("ok", body)
        end
        for i, k in ipairs(keys) do
            assert.equal(tostring(times[i] or 0), tostring(data:command("GET", k .. ":counter")))
            assert.equal(0, data:command("EXISTS", k))
        end
        assert.same({}, ngx_server:errors())
    end)
end)

-- The hand-off inside nginx: a freed permit, a writer's key or the readers'
-- set handed in the release's atomic step to nginx requests ("p" waiters:
-- a message to their worker's subscriber) in one queue per key with plain
-- Lua processes ("h" waiters: a BLPOP of their own). One worker, whose
-- subscriber listens before the waiters come; a server of its own, so that
-- what is left at the end is counted exactly.
local HANDOFF_SERVER = [[
        location = /kfifo { content_by_lua_block { require("kinds").kfifo() } }
        location = /kfifo_close { content_by_lua_block { require("kinds").kfifo_close() } }
        location = /kfifo_end { content_by_lua_block { require("kinds").kfifo_end() } }
        location = /kfifo_slow { content_by_lua_block { require("kinds").kfifo_slow() } }
        location = /hook_yield { content_by_lua_block { require("kinds").hook_yield() } }
        location = /kfifo_abort {
            lua_check_client_abort on;
            content_by_lua_block { require("kinds").kfifo() }
        }]]

describe("the kinds' hand-off inside nginx, in one queue with plain Lua processes", function()
    local it = helper.needing(it, "script_time")
    if missing then
        pending("skipped: " .. missing)
        return
    end
    local redlock = require "redlock"
    local redis, data, ngx_server
    setup(function()
        redis = helper.start_server()
        data = core.conn(redis:spec())
        ngx_server = nginx.start { workers = 1, redis = redis, server = HANDOFF_SERVER,
            lua_path = "@REPO@/spec/openresty/?.lua;" }
    end)
    teardown(function()
        if ngx_server then ngx_server:stop() end
        if data then data:close() end
        helper.stop_all()
    end)

    -- The worker's subscriber listens (its first waiter started it): its
    -- later waiters join as "p".
    local function subscribed()
        local warm = helper.key("warm")
        assert.equal("OK", data:command("SET", warm, "x", "PX", 5000))
        assert.matches("^timeout", (ngx_server:get("/kfifo?kind=writer&wait=50&key=" .. warm)))
        data:command("DEL", warm)
        assert.is_true(helper.eventually(5000, function()
            return data:command("PUBSUB", "NUMSUB", "redlock:wake")[2] >= 1
        end), "no subscriber")
    end

    local function queued(key) return data:command("ZCARD", "{" .. key .. "}:waiters") end

    -- Each waiter's how, in queue order (scripts/parts/join_queue.lua): "p"
    -- handed by a message, "h" on its hand-off list, "w" woken only.
    local function hows(key)
        local t = {}
        for _, token in ipairs(data:command("ZRANGE", "{" .. key .. "}:waiters", 0, -1)) do
            local d = data:command("HGET", "{" .. key .. "}:waiting", token)
            local ttl, fenced = d:match("^%d+ (%d+) (%d)")
            t[#t + 1] = ttl == "0" and "w" or tonumber(fenced) >= 2 and "p" or "h"
        end
        return table.concat(t)
    end

    -- n waiters queued, the last one started by start()
    local function enqueue(key, n, start)
        local w = start()
        assert.is_true(helper.eventually(5000, function() return queued(key) == n end), "waiter " .. n)
        return w
    end

    -- A waiter's line ("acquired T fence F"): its fence.
    local function fence_of(w, i)
        local out
        if w.dir then
            local status
            status, out = w:wait()
            assert.equal(0, status, out)
        else
            local code
            out, code = w.wait()
            assert.equal(200, code, out)
        end
        local fence = out:match("acquired %S+ fence (%d+)")
        assert(fence, "waiter " .. i .. ": " .. tostring(out))
        return tonumber(fence)
    end

    -- A test's key, and at_end(f): f runs when the test ends, whatever
    -- failed (busted keeps one finally per test: this one). The keys of a
    -- test that failed (its waiters may stay queued for their whole wait)
    -- are not counted against the tests after it: one failure is reported
    -- once.
    local cleared, failed = {}, {}
    local function test_key(prefix)
        local key, at_end = helper.key(prefix), {}
        finally(function()
            for i = #at_end, 1, -1 do at_end[i]() end
            if not cleared[key] then failed[#failed + 1] = key end
        end)
        return key, function(f) at_end[#at_end + 1] = f end
    end

    -- Nothing of the keys is left: the server holds the fence counter only
    -- (and what tests that failed left).
    local function nothing_left(key)
        local function left()
            local t = {}
            for _, k in ipairs(data:command("KEYS", "*")) do
                local known = k == "redlock:fences"
                for _, f in ipairs(failed) do known = known or k:find(f, 1, true) ~= nil end
                if not known then t[#t + 1] = k end
            end
            return t
        end
        assert.is_true(helper.eventually(3000, function() return #left() == 0 end),
            "left: " .. table.concat(left(), " "))
        assert.equal(1, data:command("EXISTS", "redlock:fences"))
        cleared[key] = true
    end

    local function worker(key, hold, kind, wait)
        return helper.spawn("spec/workers/lock_worker.lua", "wait", redis:url(), key, 10000, wait or 20000,
            "notify", hold, 10000, kind)
    end

    it("a waiter whose on_event hook yields as it takes the lock by its own attempt keeps it: its worker's"
        .. " subscriber does not take it for a request that ended", function()
        local key, at_end = test_key("hookyield")
        subscribed()
        local holder = redlock.new { servers = { redis:url() }, ttl = 1500 }
        local other = redlock.new { servers = { redis:url() }, ttl = 10000 }
        local w, second
        at_end(function()
            -- (the request ends, the key and the go key go, whatever failed)
            if second then second:release() end
            data:command("SET", key .. ":go", "1")
            if w then w.wait() end
            data:command("DEL", key .. ":go")
            holder:close()
            other:close()
        end)
        -- never released: it expires, and the waiter's attempt takes it
        local expired = assert(holder:acquire(key)).token
        w = ngx_server:bg("/hook_yield?key=" .. key)
        -- the request holds the key once it holds a token other than the holder's: nobody else asks before
        -- (one that did could take it at the expiry, which hands nothing over, before the request)
        assert.is_true(helper.eventually(20000, function()
            local v = data:command("GET", key)
            return type(v) == "string" and #v == 32 and v ~= expired
        end), "the waiter did not take it")
        -- (within the hook's wait: the worker's subscriber looks once a second)
        second = other:acquire(key, { wait = 3000 })
        data:command("SET", key .. ":go", "1")
        local out, code = w.wait()
        assert.equal(200, code, out)
        assert.is_nil(second, "two holders: the request (" .. out .. ") and another client, remaining "
            .. (second and second:remaining() or 0))
        assert.matches("mine true", out)
        assert.is_true(tonumber(out:match("remaining (%d+)")) > 0)
    end)

    it("semaphore: each permit given back goes to the first waiter in the release's step, nginx requests and"
        .. " a plain Lua process alike; a newcomer waits behind them", function()
        local key, at_end = test_key("sem")
        subscribed()
        local holder = redlock.new { servers = { redis:url() }, ttl = 10000 }
        at_end(function() holder:close() end)
        local h1 = assert(holder:acquire(key, { limit = 2 }))
        local h2 = assert(holder:acquire(key, { limit = 2 }))
        local q = "/kfifo?kind=limit&limit=2&wait=20000&hold=300&key=" .. key
        local a = enqueue(key, 1, function() return ngx_server:bg(q) end)
        local b = enqueue(key, 2, function() return worker(key, 300, "limit=2") end)
        local c = enqueue(key, 3, function() return ngx_server:bg(q) end)
        assert.equal("php", hows(key)) -- one queue: two nginx requests, one plain Lua process
        assert.is_true(h1:release())
        -- the permit is the first waiter's at once: never free for a newcomer
        assert.equal(3, data:command("ZCARD", key)) -- "limit", h2's and a's
        local _, _, code = holder:try_acquire(key, { limit = 2 })
        assert.equal("locked", code)
        assert.is_true(h2:release())
        assert.equal(3, data:command("ZCARD", key))
        local newcomer = assert(holder:acquire(key, { limit = 2, wait = 20000 }))
        local last = h2.fence
        for i, w in ipairs { a, b, c } do
            local fence = fence_of(w, i)
            assert.is_true(fence > last, "waiter " .. i .. " out of turn")
            last = fence
        end
        assert.is_true(newcomer.fence > last, "the newcomer went before a waiter")
        assert.is_true(newcomer:release())
        holder:close()
        nothing_left(key)
        assert.same({}, ngx_server:errors())
    end)

    it("readers and writers: a writer's release lets the readers at the front in together, the last reader"
        .. " hands the key to the waiting writer, nginx requests and plain Lua processes alike", function()
        local key, at_end = test_key("rw")
        subscribed()
        local holder = redlock.new { servers = { redis:url() }, ttl = 10000 }
        at_end(function() holder:close() end)
        local w0 = assert(holder:acquire(key))
        local function q(kind) return "/kfifo?kind=" .. kind .. "&wait=20000&hold=300&key=" .. key end
        local r1 = enqueue(key, 1, function() return ngx_server:bg(q("shared")) end)
        local r2 = enqueue(key, 2, function() return worker(key, 300, "shared") end)
        local w1 = enqueue(key, 3, function() return ngx_server:bg(q("writer")) end)
        local r3 = enqueue(key, 4, function() return ngx_server:bg(q("shared")) end)
        local w2 = enqueue(key, 5, function() return worker(key, 300) end)
        assert.equal("phpph", hows(key)) -- one queue: nginx requests and plain Lua processes
        assert.is_true(w0:release())
        -- the two readers at the front hold the key at once, together
        assert.equal("zset", data:command("TYPE", key))
        assert.equal(3, data:command("ZCARD", key)) -- "shared", r1's and r2's
        -- a writer waits: a new reader waits behind it
        local _, _, code = holder:try_acquire(key, { shared = true })
        assert.equal("locked", code)
        local newcomer = assert(holder:acquire(key, { wait = 20000 }))
        local f = {}
        for i, w in ipairs { r1, r2, w1, r3, w2 } do f[i] = fence_of(w, i) end
        assert.is_true(f[1] > w0.fence and f[2] > f[1], "the readers at the front")
        assert.is_true(f[3] > f[2], "the writer after the readers before it")
        assert.is_true(f[4] > f[3] and f[5] > f[4], "the reader, then the writer, after the writer")
        assert.is_true(newcomer.fence > f[5], "the newcomer went before a waiter")
        assert.is_true(newcomer:release())
        holder:close()
        nothing_left(key)
        assert.same({}, ngx_server:errors())
    end)

    for _, case in ipairs {
        { what = "a permit", kind = "limit", worker = "limit=1", opts = { limit = 1 } },
        { what = "a read lock", kind = "shared", opts = {} },
    } do
        it("a request that ends while it waits (its client went away) leaves the queue, and " .. case.what
            .. " handed to it passes on", function()
            local key, at_end = test_key("abort")
            subscribed()
            local holder = redlock.new { servers = { redis:url() }, ttl = 10000 }
            at_end(function() holder:close() end)
            local lock = assert(holder:acquire(key, case.opts))
            -- what it is handed would stay 60 s: the next waiter (wait 20 s) would time out
            local gone = enqueue(key, 1, function()
                return ngx_server:bg("/kfifo_abort?kind=" .. case.kind .. "&limit=1&wait=30000&ttl=60000&key="
                    .. key, 1.5)
            end)
            local b = enqueue(key, 2, function() return worker(key, 0, case.worker) end)
            assert.equal("ph", hows(key))
            assert.is_true(helper.eventually(5000, gone.done)) -- curl gave up after 1.5 s
            -- nginx ended the request (lua_check_client_abort): it logs a 499
            assert.is_true(helper.eventually(5000, function()
                return (nginx.read(ngx_server.dir .. "/access.log") or ""):find("/kfifo_abort%?[^\n]*"
                    .. key:gsub("%p", "%%%0") .. "[^\n]* 499 ") ~= nil
            end), "the request did not end")
            assert.is_true(lock:release())
            assert.is_true(fence_of(b, 2) > lock.fence)
            holder:close()
            nothing_left(key)
            assert.same({}, ngx_server:errors())
        end)
    end

    -- A request that ends during one of its own calls to Redis, not while
    -- it waits: its next attempt sent, its answer not read (/kfifo_end).
    -- The attempt ran (its place in the queue kept), and the release that
    -- follows hands that request the lock: its worker's subscriber learns
    -- that the request ended (redlock.nginx.wait) and passes the lock on.
    for _, case in ipairs {
        { what = "a lock", kind = "writer", opts = {} },
        { what = "a lock (waited for in the request's own thread)", kind = "writer", opts = {}, entry = true },
        { what = "a permit", kind = "limit", worker = "limit=1", opts = { limit = 1 } },
        { what = "a read lock", kind = "shared", opts = {} },
    } do
        it("a request that ends during its own call to Redis leaves the queue, and " .. case.what
            .. " handed to it passes on", function()
            local key, at_end = test_key("incall")
            subscribed()
            local holder = redlock.new { servers = { redis:url() }, ttl = 10000 }
            at_end(function() holder:close() end)
            local lock = assert(holder:acquire(key, case.opts))
            -- what it is handed would stay 60 s: the next waiter (wait 20 s) would time out
            local gone = ngx_server:bg("/kfifo_end?kind=" .. case.kind .. "&limit=1&n=2&wait=30000&ttl=60000&key="
                .. key .. (case.entry and "&entry=1" or ""))
            assert.is_true(helper.eventually(5000, function() return queued(key) == 1 end), "waiter 1")
            local b = enqueue(key, 2, function() return worker(key, 0, case.worker) end)
            assert.equal("ph", hows(key))
            local out, code = gone.wait()
            assert.equal(200, code, out)
            assert.matches("^ended %x+$", out)
            -- its last attempt ran: it is first in the queue still
            assert.equal("ph", hows(key))
            assert.is_true(lock:release())
            assert.is_true(fence_of(b, 2) > lock.fence)
            holder:close()
            nothing_left(key)
            assert.same({}, ngx_server:errors())
        end)
    end

    -- A live request between two waits for longer than the subscriber
    -- takes to look (/kfifo_slow: a slow answer, as its worker's subscriber
    -- sees it) when a release hands it the lock: the lock stays its own, and
    -- the waiter behind it comes after it.
    for _, case in ipairs {
        { what = "a lock", kind = "writer", opts = {} },
        { what = "a permit", kind = "limit", worker = "limit=1", opts = { limit = 1 } },
    } do
        it("a request handed " .. case.what .. " during a slow call to Redis takes it", function()
            local key, at_end = test_key("slow")
            subscribed()
            local holder = redlock.new { servers = { redis:url() }, ttl = 10000 }
            at_end(function() holder:close() end)
            local lock = assert(holder:acquire(key, case.opts))
            -- (2.5 s: the subscriber looks at least twice meanwhile, once a second)
            local slow = enqueue(key, 1, function()
                return ngx_server:bg("/kfifo_slow?kind=" .. case.kind .. "&limit=1&n=2&ms=2500&wait=20000&key="
                    .. key)
            end)
            local b = enqueue(key, 2, function() return worker(key, 0, case.worker) end)
            assert.equal("ph", hows(key))
            assert.is_true(helper.eventually(5000, function() return data:command("GET", key .. ":slow") == "1" end),
                "no slow call")
            assert.is_true(lock:release())
            local f1 = fence_of(slow, 1)
            assert.is_true(f1 > lock.fence)
            assert.is_true(fence_of(b, 2) > f1, "the waiter behind it went first")
            holder:close()
            nothing_left(key)
            assert.same({}, ngx_server:errors())
        end)
    end

    -- A release that hands the lock to a waiter as its last wait ends:
    -- Redis paused for writes (CLIENT PAUSE WRITE) runs the release, sent
    -- first, before the waiter's GIVE_UP at its deadline, sent while paused.
    -- The waiter takes the lock (the message came before GIVE_UP's answer),
    -- rather than releasing it and answering "timeout".
    for _, case in ipairs {
        { what = "a lock", kind = "writer", opts = {} },
        { what = "a permit", kind = "limit", opts = { limit = 1 } },
    } do
        it("a request whose wait ends as " .. case.what .. " is handed to it takes it", function()
            helper.needs("pause_write")
            local key, at_end = test_key("late")
            subscribed()
            local holder = redlock.new { servers = { redis:url() }, ttl = 60000, timeout = 10000 }
            at_end(function() holder:close() end)
            local lock = assert(holder:acquire(key, case.opts))
            -- one block (wait under notify.RECHECK_MS), which ends at the deadline
            local late = enqueue(key, 1, function()
                return ngx_server:bg("/kfifo?kind=" .. case.kind .. "&limit=1&wait=900&timeout=10000&key=" .. key)
            end)
            assert.equal("p", hows(key))
            -- the release that hands over in one script (a single lock's two-key
            -- one would answer 2 first), its script loaded (EVALSHA's NOSCRIPT
            -- would come after the pause, and EVAL after GIVE_UP)
            local function release(l)
                if case.kind == "limit" then return l:release() end
                return require("redlock.scripted").release_waking(holder.servers[1], l.key, l.token)
            end
            assert.is_true(release(assert(holder:acquire(key .. ":other", case.opts))))
            -- until after its deadline (900 ms after it joined), not after its place
            -- in the queue ends (a second after that: wait_slack.lua), nor its
            -- GIVE_UP's timeout
            assert.equal("OK", data:command("CLIENT", "PAUSE", 1200, "WRITE"))
            assert.is_true(release(lock))
            assert.is_true(fence_of(late, 1) > lock.fence)
            holder:close()
            nothing_left(key)
            assert.same({}, ngx_server:errors())
        end)
    end

    -- The request's cleanup closed its client (so every eval of that client
    -- answers "closed") before its waiter was taken off: the give-back
    -- still runs (redlock.nginx.wait's abandon, Server:owing).
    for _, case in ipairs {
        { what = "a lock", kind = "writer", opts = {} },
        { what = "a permit", kind = "limit", worker = "limit=1", opts = { limit = 1 } },
    } do
        it("a request that closed its client and ended while it waited leaves the queue, and " .. case.what
            .. " handed to it passes on", function()
            local key, at_end = test_key("closed")
            subscribed()
            local holder = redlock.new { servers = { redis:url() }, ttl = 10000 }
            at_end(function() holder:close() end)
            local lock = assert(holder:acquire(key, case.opts))
            -- what it is handed would stay 60 s: the next waiter (wait 20 s) would time out
            local gone = ngx_server:bg("/kfifo_close?kind=" .. case.kind .. "&limit=1&n=2&wait=30000&ttl=60000&key="
                .. key)
            assert.is_true(helper.eventually(5000, function() return queued(key) == 1 end), "waiter 1")
            local b = enqueue(key, 2, function() return worker(key, 0, case.worker) end)
            local out, code = gone.wait()
            assert.equal(200, code, out)
            assert.matches("^closed", out)
            assert.is_true(lock:release())
            assert.is_true(fence_of(b, 2) > lock.fence)
            holder:close()
            nothing_left(key)
            assert.same({}, ngx_server:errors())
        end)
    end
end)
