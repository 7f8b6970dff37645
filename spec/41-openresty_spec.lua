-- Real nginx with the Lua module (Debian's nginx + libnginx-mod-http-lua),
-- running examples/openresty: locks over cosockets that do not block the
-- worker, and the blocking path where nginx has no cosockets. Needs the core
-- built for LuaJIT (`make build-jit`; `make test` does it).
local helper = require "helper"
local core = require "redlock.core"
local nginx = require "openresty.nginx"

-- (in the Lua 5.4 suite only: nginx.missing)
local missing = nginx.missing()
local JIT_CORE = "build/jit/redlock/core.so"

-- The test's own lines in the example's nginx.conf (its markers).
local LUA_PATH = "@REPO@/spec/openresty/?.lua;"
local HTTP = [[init_worker_by_lua_block { require("probe").init_worker() }
    lua_shared_dict redlock_sentinel 1m;]]
local SERVER = [[
        location = /probe { content_by_lua_block { require("probe").report() } }
        location = /hold { content_by_lua_block { require("probe").hold() } }
        location = /notified { content_by_lua_block { require("probe").notified() } }
        location = /fifo { content_by_lua_block { require("probe").fifo() } }
        location = /fifo_abort {
            lua_check_client_abort on;
            content_by_lua_block { require("probe").fifo() }
        }
        location = /unreleased { content_by_lua_block { require("probe").unreleased() } }
        location = /incr_legacy { content_by_lua_block { require("probe").incr_legacy() } }
        location = /incr_redlock { content_by_lua_block { require("probe").incr_redlock() } }
        location = /watch { content_by_lua_block { require("probe").watch() } }
        location = /auth { content_by_lua_block { require("probe").auth() } }
        location = /detect { content_by_lua_block { require("probe").detect() } }
        location = /grant { content_by_lua_block { require("probe").grant() } }
        location = /garbled { content_by_lua_block { require("probe").garbled() } }
        location = /renew { content_by_lua_block { require("probe").renew() } }
        location = /renewing { content_by_lua_block { require("probe").renewing() } }
        location = /renew_gone { content_by_lua_block { require("probe").renew_gone() } }
        location = /tls { content_by_lua_block { require("probe").tls() } }
        location = /sentinel { content_by_lua_block { require("probe").sentinel() } }
        location = /sentinel_shared { content_by_lua_block { require("probe").sentinel_shared() } }
        location = /legacy_switch { content_by_lua_block { require("probe").legacy_switch() } }
        location = /tls_api { content_by_lua_block { require("probe").tls_api() } }
        location = /cluster_incr { content_by_lua_block { require("probe").cluster_incr() } }
        location = /cluster_try { content_by_lua_block { require("probe").cluster_try() } }
        location = /cluster_notified { content_by_lua_block { require("probe").cluster_notified() } }
        location = /cluster_set {
            set_by_lua_block $cluster_set { return require("probe").cluster_set() }
            return 200 "$cluster_set\n";
        }]]
local function start(redis, workers, redlock_ports, http, server)
    local init = string.format('require("probe").init { %s }', table.concat(redlock_ports, ", "))
    return nginx.start { workers = workers, redis = redis, http = HTTP .. (http or ""),
        server = SERVER .. (server or ""), init = init, lua_path = LUA_PATH }
end

local function lines(body)
    local t = {}
    for k, v in (body or ""):gmatch("([%w_]+)=([^\n]*)") do t[k] = v end
    return t
end

describe("OpenResty (nginx + Lua module)", function()
    if missing then
        pending("skipped: " .. missing)
        return
    end

    local redis, data, ngx_server, redlock_ports
    setup(function()
        assert(io.open(JIT_CORE), JIT_CORE .. " is missing: run `make build-jit`"):close()
        redis = helper.start_server()
        data = core.conn(redis:spec())
        redlock_ports = { redis.port, helper.start_server().port, helper.start_server().port }
    end)
    teardown(function()
        if ngx_server then ngx_server:stop() end
        if data then data:close() end
        helper.stop_all()
    end)

    -- n requests to path?key=KEY, 16 at a time: each must answer a
    -- different value, 1..n, and the counter must end at n (in store:
    -- a connection, default the test's Redis). key: default a fresh one.
    local function increments(path, n, store, key)
        store = store or data
        key = key or helper.key("counter")
        local paths = {}
        for i = 1, n do
            paths[i] = path .. (path:find("?", 1, true) and "&" or "?") .. "key="
                .. key:gsub("[^%w:_-]", function(ch) return string.format("%%%02X", ch:byte()) end) .. "&i=" .. i
        end
        local codes, bodies = ngx_server:parallel(paths, 16)
        local seen = {}
        for i = 1, n do
            local body = bodies[i]
            assert.equal("200", codes[i], "request " .. i .. " answered: " .. tostring(body))
            local v = tonumber(body)
            assert(v, "request " .. i .. " answered 200 without a number: '" .. tostring(body) .. "'")
            assert.is_nil(seen[v], "value " .. tostring(v) .. " answered twice")
            seen[v] = true
        end
        for v = 1, n do assert.is_true(seen[v], "no request answered " .. v) end
        assert.equal(tostring(n), store:command("GET", key))
        assert.equal(0, store:command("EXISTS", "lock:" .. key))
        assert.same({}, ngx_server:errors())
    end

    describe("4 workers", function()
        setup(function() ngx_server = start(redis, 4, redlock_ports) end)
        teardown(function()
            ngx_server:stop()
            ngx_server = nil
        end)

        -- (the driver's own check: curl says the codes in the order the
        -- requests end, and a misread once turned a 502 into "200 without
        -- a number")
        it("gives each of parallel requests its own code and body, a slow one among fast ones", function()
            -- (curl starts the others when the first has ended)
            local paths = { "/nosuch?i=1", "/hold?ms=300&key=" .. helper.key("slow") }
            for i = 3, 6 do paths[i] = "/nosuch?i=" .. i end
            ngx_server:expect_error('request: "GET /nosuch?i=') -- nginx logs each 404
            local codes, bodies = ngx_server:parallel(paths, 6)
            assert.same({ "404", "200", "404", "404", "404", "404" }, codes)
            assert.equal("released\n", bodies[2])
        end)

        it("200 concurrent increments under the lock lose no update", function()
            increments("/incr", 200)
        end)

        it("serves the lock events of every worker at /metrics (examples/openresty/metrics.lua)", function()
            local function count(body, kind)
                return tonumber(body:match('redlock_events_total{type="' .. kind .. '"} (%d+)'))
            end
            local before = assert((ngx_server:get("/metrics")))
            increments("/incr", 50)
            local body, code = ngx_server:get("/metrics")
            assert.equal(200, code, body)
            assert.equal(50, count(body, "acquired") - count(before, "acquired"), body)
            assert.equal(50, count(body, "released") - count(before, "released"), body)
            local n = tonumber(body:match('redlock_wait_ms_bucket{le="%+Inf"} (%d+)'))
            assert.equal(n, tonumber(body:match("redlock_wait_ms_count (%d+)")), body)
            assert.is_true(n >= 50, body)
        end)

        it("legacy mode (WATCH/MULTI/EXEC over cosockets): 100 concurrent increments lose no update", function()
            increments("/incr_legacy", 100)
            local t = lines((ngx_server:get("/probe")))
            assert.equal("legacy", t.legacy_mode)
        end)

        it("Redlock over 3 servers (fan-out in light threads): 100 concurrent increments lose no update", function()
            increments("/incr_redlock", 100)
        end)

        it("with_lock whose release fails after fn returned: false, err, code and fn's results, the key left held",
            function()
                local t = lines((ngx_server:get("/unreleased?key=" .. helper.key())))
                assert.equal("false", t.ok, t.err)
                assert.equal("closed", t.code)
                assert.equal("6", t.n)
                assert.equal("done,nil,3", t.results)
                assert.matches("^closed: the client is closed; fn ran and returned %(its results follow%)", t.err)
                assert.equal("locked", t.held)
            end)

        it("uses hiredis where nginx has no cosockets (init, init_worker) and cosockets in timers and requests",
            function()
                ngx_server:get("/incr?key=" .. helper.key())
                local body, code = ngx_server:get("/probe")
                assert.equal(200, code, body)
                local t = lines(body)
                assert.equal("ok", t.init, body)                 -- master, init_by_lua: hiredis
                assert.equal("true", t.init_connected, body)
                assert.equal("cosocket", t.init_transport, body)
                assert.equal("ok", t.init_worker, body)          -- worker, init_worker_by_lua: hiredis
                assert.equal("true", t.init_worker_own_conn, body) -- not the master's socket
                assert.equal("ok", t.init_worker_redlock, body)  -- Redlock's fan-out over poll()
                assert.equal("timer", t.timer_phase, body)
                assert.equal("ok", t.timer, body)
                assert.equal("cosocket", t.content_transport, body)
                assert.equal("false", t.content_blocking_connected, body) -- never used hiredis
            end)

        it("keeps WATCH..EXEC on one connection per caller, and survives SCRIPT FLUSH", function()
            local key = helper.key("watch")
            local body, code = ngx_server:get("/watch?key=" .. key)
            assert.equal(200, code, body)
            local t = lines(body)
            -- GET of a missing key answers the null: it prints as a userdata
            local function shown(s) return (tostring(s):gsub("userdata: [%w%(%)]+", "null")) end
            assert.equal("OK null OK QUEUED {OK}", shown(t.a), body)
            assert.equal("OK null OK QUEUED {OK}", shown(t.b), body)
            assert.equal("va", data:command("GET", key .. ":a"))
            assert.equal("vb", data:command("GET", key .. ":b"))
            assert.equal("ok", t.noscript, body)
        end)

        it("runs AUTH and SELECT on new pooled connections, hides the password, reports refused connections",
            function()
            local locked = helper.start_server { password = "pw-for-nginx-test" }
            local key = helper.key("auth")
            local body = ngx_server:get(string.format("/auth?port=%d&password=pw-for-nginx-test&db=3&key=%s",
                locked.port, key))
            local t = lines(body)
            assert.matches("^%x+$", t.token or "", body)
            assert.equal(t.token, locked:cli("-n", "3", "GET", key))
            body = ngx_server:get(string.format("/auth?port=%d&password=wrong-pw-xyz&db=3&key=%s",
                locked.port, helper.key("auth")))
            t = lines(body)
            assert.equal("server", t.code, body)
            assert.matches("^server: 127%.0%.0%.1:%d+: AUTH failed: WRONGPASS", t.err)
            assert.is_nil(body:find("wrong-pw-xyz", 1, true))
            locked:stop()
            -- nothing listens there any more
            body = ngx_server:get(string.format("/auth?port=%d&key=%s", locked.port, helper.key("auth")))
            t = lines(body)
            assert.equal("connection", t.code, body)
            assert.matches("^connection: 127%.0%.0%.1:%d+: could not connect %(", t.err)
        end)

        it("warns in the error log (ngx.log, warn) of a server that may evict lock keys, once per worker",
            function()
            local evicting = helper.start_server { config = { "maxmemory 100mb", "maxmemory-policy allkeys-lru" } }
            for _ = 1, 3 do
                local body = ngx_server:get(string.format("/auth?port=%d&key=%s", evicting.port, helper.key("evict")))
                assert.matches("token=%x+", body)
            end
            local f = assert(io.open(ngx_server.dir .. "/error.log"))
            local log = f:read("*a")
            f:close()
            local _, n = log:gsub("%[warn%][^\n]*redlock: warning: 127%.0%.0%.1:" .. evicting.port
                .. " may evict lock keys: maxmemory%-policy allkeys%-lru", "")
            assert.is_true(n >= 1 and n <= 3, log)
            evicting:stop()
        end)
    end)

    describe("the nginx.conf of docs/openresty.md", function()
        local readme_ngx
        teardown(function()
            if readme_ngx then readme_ngx:stop() end
        end)

        -- the README's configuration, with this repository, a free port and
        -- the test's Redis in place of its /path/to/redlock, 8080 and 6379
        local function readme_conf(port)
            local text = assert(nginx.read("docs/openresty.md"))
            local conf = assert(text:match("%*%*nginx%.conf%*%*.-```nginx[^\n]*\n(.-)```"), "no nginx.conf in docs/openresty.md")
            local repo = nginx.read_cmd("pwd"):gsub("%s+$", "")
            local n
            conf = conf:gsub("/path/to/redlock", repo)
            conf, n = conf:gsub("listen 127%.0%.0%.1:8080;", "listen 127.0.0.1:" .. port .. ";")
            assert.equal(1, n)
            conf, n = conf:gsub("port = 6379", "port = " .. redis.port)
            assert.equal(1, n)
            -- workers run as nobody: where it cannot read the repository (a
            -- clone under /root), the README says to set `user`
            if not nginx.read_cmd("su -s /bin/sh nobody -c " .. helper.quote("test -r " .. helper.quote(
                repo .. "/lua/redlock.lua") .. " && echo readable") .. " 2>/dev/null"):find("readable") then
                conf = "user root;\n" .. conf
            end
            return conf
        end

        it("passes nginx -t and sells: 200 requests, 20 at a time, each get the lock, no lost update", function()
            readme_ngx = nginx.start_conf(readme_conf, true)
            assert.matches("test is successful", readme_ngx.tested)
            data:command("SET", "stock:sku-42", "1000")
            local paths = {}
            for i = 1, 200 do paths[i] = "/sell?i=" .. i end
            local codes, bodies = readme_ngx:parallel(paths, 20)
            local seen = {}
            for i = 1, 200 do
                local body = bodies[i]
                -- the default client with wait = 3000: a 503 is a timeout
                assert.equal("200", codes[i], "request " .. i .. " answered: " .. tostring(body))
                local left = assert(tonumber(body), body)
                assert.is_nil(seen[left], "stock " .. left .. " answered twice")
                seen[left] = true
            end
            assert.equal("800", data:command("GET", "stock:sku-42"))
            assert.equal(0, data:command("EXISTS", "lock:stock:sku-42"))
            assert.same({}, readme_ngx:errors())
            readme_ngx:stop()
            readme_ngx = nil
        end)

        it("make build-jit builds the core alone with pkg-config absent from PATH; the test programs"
            .. " build there too", function()
            local bin, build = helper.fresh_dir("bin"), helper.fresh_dir("build")
            local function make(args)
                return nginx.read_cmd(string.format("PATH=%s sh -c 'command -v pkg-config || echo no-pkg-config; "
                    .. "make -s %s 2>&1; echo rc=$?'", bin, args))
            end
            nginx.read_cmd(string.format("for f in /usr/bin/*; do case ${f##*/} in "
                .. "*pkg-config*|*pkgconf*) ;; *) ln -s \"$f\" %s/ ;; esac; done", bin))
            local out = make("build-jit JIT_BUILD=" .. build)
            assert.matches("no%-pkg%-config", out)
            assert.matches("rc=0", out, 1, true)
            assert.truthy(io.open(build .. "/redlock/core.so"), out)
            assert.falsy(io.open(build .. "/tests"), "build-jit built the test programs")
            -- they link LuaJIT by its Debian name without pkg-config
            out = make("LUA_VERSION=jit BUILD=" .. build .. " build-tests")
            assert.matches("rc=0", out, 1, true)
            assert.truthy(io.open(build .. "/tests/topo_test"), out)
        end)
    end)

    describe("the driver's stop file", function()
        -- (what spec/run.sh and torture/run.sh run when a suite dies: sh
        -- is dash here, whose kill takes no `--`)
        it("stops nginx and every worker when sh runs it", function()
            local srv = nginx.start { workers = 2, redis = redis }
            local function alive()
                for line in nginx.read_cmd("ps -e -o pgid=,stat="):gmatch("[^\n]+") do
                    local pgid, stat = line:match("^%s*(%d+)%s+(%S+)")
                    if pgid == srv.pid and not stat:match("^Z") then return true end
                end
                return false
            end
            assert.is_true(alive())
            os.execute("sh " .. helper.quote(srv.dir .. "/stop"))
            local gone = helper.eventually(3000, function() return not alive() end)
            if not gone then srv:stop() end
            assert.is_true(gone, "nginx outlived its stop file")
        end)
    end)

    describe("1 worker", function()
        setup(function() ngx_server = start(redis, 1, redlock_ports) end)
        teardown(function()
            ngx_server:stop()
            ngx_server = nil
        end)

        it("mode auto over cosockets: a wrong password decides nothing, a refusal of scripting does,"
            .. " and a new connection asks again", function()
            local srv = helper.start_server { password = "admin-pw" }
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "on", ">locker-pw", "~*", "&*", "+@all",
                "-@scripting"))
            local function detect(password)
                return lines((ngx_server:get(string.format("/detect?port=%d&user=locker&password=%s&key=%s",
                    srv.port, password, helper.key("detect")))))
            end
            local t = detect("wrong-pw")
            assert.equal("server", t.code)
            assert.matches("WRONGPASS", t.err)
            assert.not_matches("legacy", t.err)
            assert.equal("nil", t.mode)
            t = detect("locker-pw")
            assert.equal("true", t.ok, t.err)
            assert.equal("legacy", t.mode)
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "+@scripting"))
            srv:cli("CLIENT", "KILL", "USER", "locker")
            t = detect("locker-pw") -- finds its pooled connection gone: a new one
            assert.equal("true", t.ok, t.err)
            t = detect("locker-pw")
            assert.equal("true", t.ok, t.err)
            assert.equal("script", t.mode)
            srv:stop()
            assert.same({}, ngx_server:errors())
        end)

        it("serves other requests while one waits on a held lock", function()
            local key = helper.key("held")
            local holder = ngx_server:bg("/hold?key=" .. key .. "&ms=2500")
            for _ = 1, 250 do
                if data:command("EXISTS", "lock:" .. key) == 1 then break end
                helper.sleep(20)
            end
            assert.equal(1, data:command("EXISTS", "lock:" .. key))
            local waiter = ngx_server:bg("/incr?key=" .. key)
            helper.sleep(200)
            local body, code, took = ngx_server:get("/health", 10)
            assert.equal(200, code)
            assert.equal("ok", body)
            -- the one worker answered at once although a request of its own
            -- was waiting for the lock (a blocking wait would stall it until
            -- the holder's 2.5 s are over, or until the waiter gave up)
            assert.is_true(took < 1.0, "health took " .. took .. " s")
            assert.is_false(holder.done())
            assert.is_false(waiter.done())
            body, code = holder.wait()
            assert.equal(200, code, body)
            assert.equal("released", body)
            body, code = waiter.wait()
            assert.equal(200, code, body)
            assert.equal("1", body)
            assert.same({}, ngx_server:errors())
        end)

        it("a release wakes a waiting request through the worker's subscriber, not a poll", function()
            local key = helper.key("notified")
            local holder = ngx_server:bg("/hold?key=" .. key .. "&ms=1500")
            for _ = 1, 250 do
                if data:command("EXISTS", "lock:" .. key) == 1 then break end
                helper.sleep(20)
            end
            -- the worker's first waiter starts its subscriber, and polls
            local body = ngx_server:get("/notified?key=" .. key .. "&wait=50")
            assert.matches("^timeout", body)
            -- this one's polling would sleep until its wait of 3 s is over
            -- (retry_delay 10 s, the holder's ttl 5 s): once the holder has
            -- released, the lock would stay free until then
            local waiter = ngx_server:bg("/notified?key=" .. key .. "&wait=3000&hold=1500")
            assert.equal("released", (holder.wait()))
            helper.sleep(500)
            assert.equal(1, data:command("EXISTS", "lock:" .. key)) -- the woken waiter holds it
            assert.equal("taken", (waiter.wait()))
            assert.same({}, ngx_server:errors())
        end)

        -- The worker's subscriber listens (its first waiter started it):
        -- later waiters there are handed the lock.
        local function subscribed(key)
            local held = assert(core.conn(redis:spec()))
            local lock_key = "lock:" .. key .. ":warm"
            assert.equal("OK", held:command("SET", lock_key, "x", "PX", 5000))
            local body = ngx_server:get("/notified?key=" .. key .. ":warm&wait=50")
            assert.matches("^timeout", body)
            held:command("DEL", lock_key)
            held:close()
            assert.is_true(helper.eventually(5000, function()
                return data:command("PUBSUB", "NUMSUB", "redlock:wake")[2] >= 1
            end), "no subscriber")
        end

        -- Each waiter's how (scripts/acquire.lua): "p" an nginx
        -- waiter handed the lock by a message, "h" one blocked on its list.
        local function hows(key)
            local t = {}
            local d = data:command("HGETALL", "{lock:" .. key .. "}:waiting")
            for i = 1, #d, 2 do
                local fenced = tonumber(d[i + 1]:match("^%d+ %d+ (%d)"))
                t[#t + 1] = fenced >= 2 and "p" or "h"
            end
            table.sort(t)
            return table.concat(t)
        end

        local function redlock_client() return require("redlock").new { servers = { redis:url() } } end

        local function queued(key)
            return data:command("ZCARD", "{lock:" .. key .. "}:waiters")
        end

        local function nothing_left(key)
            local left = data:command("KEYS", "*lock:" .. key .. "*")
            assert.same({}, left)
        end

        it("hands the lock over in the order waiters came, nginx requests and a plain Lua process alike;"
            .. " a newcomer waits behind them", function()
            local key = helper.key("fifo")
            local lock_key = "lock:" .. key
            subscribed(key)
            local holder = redlock_client()
            local lock = assert(holder:acquire(lock_key, { ttl = 10000 }))
            local function q(hold) return "/fifo?key=" .. key .. "&wait=20000&hold=" .. hold end
            local a = ngx_server:bg(q(200))
            assert.is_true(helper.eventually(5000, function() return queued(key) == 1 end))
            local b = helper.spawn("spec/workers/lock_worker.lua", "wait", redis:url(), lock_key, 10000, 20000,
                "notify", 200)
            assert.is_true(helper.eventually(5000, function() return queued(key) == 2 end))
            local c = ngx_server:bg(q(200))
            assert.is_true(helper.eventually(5000, function() return queued(key) == 3 end))
            assert.equal("hpp", hows(key)) -- one queue: two nginx waiters, one outside
            assert.is_true(lock:release())
            -- handed over in the release's own step: never free for a newcomer
            assert.is_string(data:command("GET", lock_key))
            local _, _, code = holder:try_acquire(lock_key)
            assert.equal("locked", code)
            local newcomer = assert(holder:acquire(lock_key, { wait = 20000 }))
            local came = core.now()
            local fences = { lock.fence }
            assert.is_true(newcomer:release())
            local last = 0
            for i, w in ipairs { a, b, c } do
                local out
                if w.dir then
                    local status
                    status, out = w:wait()
                    assert.equal(0, status, out)
                else
                    local code2
                    out, code2 = w.wait()
                    assert.equal(200, code2, out)
                end
                local at, fence = out:match("acquired (%S+) fence (%d+)")
                assert(at, "waiter " .. i .. ": " .. out)
                assert.is_true(tonumber(at) > last, "waiter " .. i .. " out of turn")
                assert.is_true(tonumber(fence) > fences[#fences], "waiter " .. i .. "'s fence")
                last, fences[#fences + 1] = tonumber(at), tonumber(fence)
            end
            assert.is_true(came > last, "the newcomer went before a waiter")
            assert.is_true(newcomer.fence > fences[#fences])
            nothing_left(key)
            holder:close()
            assert.same({}, ngx_server:errors())
        end)

        it("fair = false: a release under the bound leaves the key free and wakes the waiting request"
            .. " through its worker's subscriber; it takes the key itself", function()
            local key = helper.key("barge")
            local lock_key = "lock:" .. key
            subscribed(key)
            local holder = redlock_client()
            local lock = assert(holder:acquire(lock_key, { ttl = 10000 }))
            local a = ngx_server:bg("/fifo?key=" .. key .. "&wait=20000&hold=0")
            assert.is_true(helper.eventually(5000, function() return queued(key) == 1 end))
            assert.equal("p", hows(key))
            local function publishes()
                local info = data:command("INFO", "commandstats")
                return tonumber(info:match("cmdstat_publish:calls=(%d+)")) or 0
            end
            local notify = require "redlock.notify"
            local was, before = notify.BARGE_MS, publishes()
            notify.BARGE_MS = "600000"
            -- nginx stopped meanwhile: the woken request cannot take the key before it is looked at
            os.execute("kill -STOP -" .. ngx_server.pid)
            local ok, err = pcall(function() return lock:release() end)
            notify.BARGE_MS = was
            local freed = data:command("GET", lock_key)
            os.execute("kill -CONT -" .. ngx_server.pid)
            assert(ok, err)
            -- not handed: freed, and the key published for the worker's subscriber
            assert.equal(core.null, freed)
            assert.equal(before + 1, publishes())
            local out, code = a.wait()
            assert.equal(200, code, out)
            assert.matches("^acquired %S+ fence %d+", out)
            assert.is_true(tonumber(out:match("fence (%d+)")) > lock.fence)
            -- (the wake-up list lives its second)
            assert.is_true(helper.eventually(3000, function()
                return #data:command("KEYS", "*lock:" .. key .. "*") == 0
            end))
            holder:close()
            assert.same({}, ngx_server:errors())
        end)

        it("a request that ends while it waits (its client went away) leaves the queue, and a lock handed"
            .. " to it passes on", function()
            local key = helper.key("abort")
            local lock_key = "lock:" .. key
            subscribed(key)
            local holder = redlock_client()
            local lock = assert(holder:acquire(lock_key, { ttl = 10000 }))
            -- its lock would stay 60 s: the next waiter (wait 20 s) would time out
            local gone = ngx_server:bg("/fifo_abort?key=" .. key .. "&wait=30000&ttl=60000", 1.5)
            assert.is_true(helper.eventually(5000, function() return queued(key) == 1 end))
            local b = helper.spawn("spec/workers/lock_worker.lua", "wait", redis:url(), lock_key, 10000, 20000,
                "notify", 0)
            assert.is_true(helper.eventually(5000, function() return queued(key) == 2 end))
            assert.equal("hp", hows(key))
            assert.is_true(helper.eventually(5000, gone.done)) -- curl gave up after 1.5 s
            -- nginx ended the request (lua_check_client_abort): it logs a 499
            assert.is_true(helper.eventually(5000, function()
                return (nginx.read(ngx_server.dir .. "/access.log") or ""):find("/fifo_abort%?key=" .. key
                    :gsub("%p", "%%%0") .. "[^\n]* 499 ") ~= nil
            end), "the request did not end")
            assert.is_true(lock:release())
            local status, out = b:wait()
            assert.equal(0, status, out)
            assert.matches("acquired", out)
            assert.is_true(helper.eventually(5000, function() return queued(key) == 0 end))
            nothing_left(key)
            holder:close()
            assert.same({}, ngx_server:errors())
        end)

        -- INFO commandstats: calls per command name
        local function calls(store)
            local info, t = (store or data):command("INFO", "commandstats"), {}
            for name, n in info:gmatch("cmdstat_(%w+):calls=(%d+)") do t[name] = tonumber(n) end
            return t
        end
        local function delta(before, after, name) return (after[name] or 0) - (before[name] or 0) end

        -- The fences a /grant answered, checked to rise from `last`.
        local function rising(t, last, n)
            local seen = 0
            for f in (t.fences or ""):gmatch("%d+") do
                assert.is_true(tonumber(f) > last, f .. " after " .. last)
                last, seen = tonumber(f), seen + 1
            end
            assert.equal(n, seen, t.err)
            return last
        end

        it("takes an uncontended lock without a script, as outside nginx: SET NX PX and XADD in one write,"
            .. " fences rising; fence = false: SET NX PX alone", function()
            local key = helper.key("grant")
            -- a client's first lock runs the acquire script (scripting works
            -- there: redlock.scripted.answer); the next go without one
            local last = rising(lines((ngx_server:get("/grant?n=1&key=" .. key .. ":warm"))), 0, 1)
            local before = calls()
            local t = lines((ngx_server:get("/grant?n=10&key=" .. key)))
            local after = calls()
            rising(t, last, 10)
            assert.equal(10, delta(before, after, "set"))
            assert.equal(10, delta(before, after, "xadd"))
            assert.equal(10, delta(before, after, "evalsha")) -- the releases
            assert.equal(0, delta(before, after, "eval"))
            -- fence = false (a client of its own)
            assert.equal("nil", lines((ngx_server:get("/grant?n=1&fence=0&key=" .. key .. ":warm0"))).fences)
            before = calls()
            t = lines((ngx_server:get("/grant?n=5&fence=0&key=" .. key .. ":u")))
            after = calls()
            assert.equal("nil nil nil nil nil", t.fences, t.err)
            assert.equal(5, delta(before, after, "set"))
            assert.equal(0, delta(before, after, "xadd"))
            assert.equal(5, delta(before, after, "evalsha"))
            nothing_left(key)
            assert.same({}, ngx_server:errors())
        end)

        it("a lock taken without a script never overtakes a queued waiter: the release hands it over first,"
            .. " and the fences rise", function()
            local key = helper.key("grant_fifo")
            local lock_key = "lock:" .. key
            subscribed(key)
            -- this worker's client takes its locks without a script now
            local last = rising(lines((ngx_server:get("/grant?n=1&key=" .. key .. ":warm"))), 0, 1)
            local holder = redlock_client()
            local lock = assert(holder:acquire(lock_key, { ttl = 10000 }))
            assert.is_true(lock.fence > last)
            -- an nginx request queued behind it (handed the lock by a message)
            local waiter = ngx_server:bg("/fifo?key=" .. key .. "&wait=20000&hold=1000")
            assert.is_true(helper.eventually(5000, function() return queued(key) == 1 end))
            assert.equal("p", hows(key))
            assert.is_true(lock:release())
            local before = calls()
            local t = lines((ngx_server:get("/grant?try=1&key=" .. lock_key)))
            assert.equal("locked", t.code, t.err)
            -- it asked with SET NX PX (refused: the key was the waiter's; the
            -- waiter's own attempt, a recheck on a loaded host, may count too)
            assert.is_true(delta(before, calls(), "set") >= 1)
            local out, code = waiter.wait()
            assert.equal(200, code, out)
            local fence = tonumber(out:match("acquired %S+ fence (%d+)"))
            assert(fence, out)
            assert.is_true(fence > lock.fence)
            -- after it, the next one's fence is above the waiter's
            rising(lines((ngx_server:get("/grant?n=1&key=" .. lock_key))), fence, 1)
            nothing_left(key)
            holder:close()
            assert.same({}, ngx_server:errors())
        end)

        it("an XADD refused after the SET: the key given back, the same 'server' failure as outside nginx",
            function()
            local srv = helper.start_server { password = "admin-pw" }
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "on", ">locker-pw", "~*", "&*", "+@all"))
            local key = helper.key("grant_xadd")
            local q = string.format("/grant?port=%d&user=locker&password=locker-pw&key=%s", srv.port, key)
            local last = rising(lines((ngx_server:get(q .. ":warm&n=1"))), 0, 1)
            local store = core.conn(srv:spec { password = "admin-pw" })
            local before = calls(store)
            rising(lines((ngx_server:get(q .. ":granted&n=1"))), last, 1)
            assert.equal(1, delta(before, calls(store), "set")) -- without a script
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "-xadd"))
            before = calls(store)
            local t = lines((ngx_server:get(q .. ":refused&n=1")))
            assert.equal("server", t.code, t.err)
            -- (the script's XADD, refused: it took the key as ours, and failed)
            assert.matches("can't run this command", t.err, 1, true)
            -- SET, then the acquire script (whose XADD is refused too), then
            -- the release of what SET took
            assert.equal(1, delta(before, calls(store), "set"))
            assert.equal(0, store:command("EXISTS", key .. ":refused:1"))
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "+xadd"))
            rising(lines((ngx_server:get(q .. ":again&n=1"))), last, 1)
            store:close()
            srv:stop()
            assert.same({}, ngx_server:errors())
        end)

        -- A reply the reader refuses (a stream corrupted on its way; no
        -- Redis sends one) in XADD's place after the SET: the connection is
        -- dropped as after a lost reply, never pooled out of step with its
        -- reader, and the acquire script takes the key as ours (as conn:grant).
        it("a garbled XADD reply after the SET: the connection dropped, the key taken by the script", function()
            local key = helper.key("garbled")
            local t = lines((ngx_server:get(string.format("/garbled?port=%d&key=%s", redis.port, key))))
            assert.is_truthy(tonumber(t.fence), t.err)
            assert.equal("ok", t.release)
            assert.equal("true", t.in_step)
            nothing_left(key)
            assert.same({}, ngx_server:errors())
        end)

        it("in mode script, a new pooled connection asks the script first: no lock is taken that a server"
            .. " refusing scripting now could not release", function()
            local srv = helper.start_server { password = "admin-pw" }
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "on", ">locker-pw", "~*", "&*", "+@all"))
            local key = helper.key("grant_new")
            local q = string.format("/grant?port=%d&user=locker&password=locker-pw&mode=script&key=%s", srv.port,
                key)
            local last = rising(lines((ngx_server:get(q .. ":warm&n=2"))), 0, 2)
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "-@scripting"))
            srv:cli("CLIENT", "KILL", "USER", "locker") -- the pooled connections end
            for i = 1, 2 do
                local t = lines((ngx_server:get(q .. ":refused" .. i .. "&n=1")))
                assert.equal("server", t.code, t.err)
                assert.equal(0, tonumber(srv:cli("EXISTS", key .. ":refused" .. i .. ":1")))
            end
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "+@scripting"))
            rising(lines((ngx_server:get(q .. ":again&n=2"))), last, 2)
            srv:stop()
            assert.same({}, ngx_server:errors())
        end)

        local function wait_for_key(key)
            for _ = 1, 250 do
                if data:command("EXISTS", key) == 1 then return true end
                helper.sleep(20)
            end
            return false
        end

        it("renews from nginx timers: a 500 ms lock outlives 1.6 s of work, then renewal stops", function()
            local key = helper.key("renew")
            -- (the times scaled by helper.ms; the figures in words are 1x)
            local req = ngx_server:bg(string.format("/renew?key=%s&ttl=%d&ms=%d", key, helper.ms(500), helper.ms(1600)))
            assert.is_true(wait_for_key(key))
            local token = data:command("GET", key)
            helper.sleep(helper.ms(1200))
            -- without renewal the key would have expired 700 ms ago
            assert.equal(token, data:command("GET", key))
            assert.is_true(data:command("PTTL", key) > 0)
            local body, code = req.wait()
            assert.equal(200, code, body)
            local t = lines(body)
            assert.equal("ok", t.release, body)
            assert.equal("no", t.on_lost, body)
            assert.equal(0, data:command("EXISTS", key))
            helper.sleep(helper.ms(400)) -- longer than a renewal period
            assert.equal("active=false", (ngx_server:get("/renewing")))
            assert.same({}, ngx_server:errors())
        end)

        it("a request that ends without releasing its renewed lock ends the renewal: the key expires",
            function()
                local key = helper.key("renew")
                local body, code = ngx_server:get("/renew_gone?key=" .. key .. "&ttl=300")
                assert.equal(200, code, body)
                -- renewed for the worker's life before: wait (up to 5 s) for
                -- the key to expire, ttl after the last renewal
                local expired = false
                for _ = 1, 250 do
                    if data:command("EXISTS", key) == 0 then
                        expired = true
                        break
                    end
                    helper.sleep(20)
                end
                assert.is_true(expired, "still renewed after its request ended")
                assert.equal("active=false", (ngx_server:get("/renewing")))
                assert.same({}, ngx_server:errors())
            end)

        it("a renewed lock deleted by hand is lost: on_lost runs, release says 'not owner'", function()
            local key = helper.key("renew")
            local req = ngx_server:bg("/renew?key=" .. key .. "&ttl=600&ms=1000")
            assert.is_true(wait_for_key(key))
            data:command("DEL", key)
            local body, code = req.wait()
            assert.equal(200, code, body)
            local t = lines(body)
            assert.equal("0", t.remaining, body)
            assert.matches("^not owner", t.release, body)
            assert.equal("yes", t.on_lost, body)
            assert.equal("true", t.handle_lost, body)
            assert.equal("active=false", (ngx_server:get("/renewing")))
        end)
    end)

    describe("TLS (cosocket sslhandshake)", function()
        local certs, plain, mutual, only, stranger
        setup(function()
            certs = helper.tls_certs()
            plain = helper.start_tls_server(certs)
            mutual = helper.start_tls_server(certs, { auth_clients = "yes" })
            -- no plaintext port at all: what works there went over TLS
            only = { helper.start_tls_server(certs, { tls_only = true }),
                     helper.start_tls_server(certs, { tls_only = true }),
                     helper.start_tls_server(certs, { tls_only = true }) }
            stranger = helper.start_tls_server(certs, { tls_only = true }) -- for the wrong CA only
            -- a location whose nginx trusts another CA than the one that
            -- signed the servers' certificates
            ngx_server = start(redis, 1, redlock_ports, string.format(
                "\n    lua_ssl_trusted_certificate %s;\n    lua_ssl_verify_depth 2;", certs.ca),
                string.format("\n        location = /tls_other_ca { lua_ssl_trusted_certificate %s;"
                    .. " content_by_lua_block { require(\"probe\").tls() } }", certs.other_ca))
        end)
        teardown(function()
            ngx_server:stop()
            ngx_server = nil
        end)

        local function tls_get(server, extra)
            local key = helper.key("tls")
            return key, lines(ngx_server:get(string.format("/tls?port=%d&key=%s%s", server.tls_port,
                key, extra or "")))
        end

        -- nginx checks a host name only, never an IP address: server_name
        -- names the certificate's DNS name (localhost) for 127.0.0.1
        it("locks over TLS, with a client certificate where the server asks for one", function()
            local key, t = tls_get(plain, "&name=localhost")
            assert.matches("^%x+$", t.token or "", t.err)
            assert.equal(t.token, plain:cli("GET", key))
            key, t = tls_get(mutual, string.format("&name=localhost&cert=%s&pkey=%s", certs.client_crt,
                certs.client_key))
            assert.matches("^%x+$", t.token or "", t.err)
            assert.equal(t.token, mutual:cli("GET", key))
            assert.same({}, ngx_server:errors())
        end)

        it("refuses a wrong name and a plaintext port with a connection error naming the server",
            function()
            local _, t = tls_get(plain, "&name=wrong.example")
            assert.equal("connection", t.code, t.err)
            assert.matches("127%.0%.0%.1:" .. plain.tls_port .. ": TLS handshake failed", t.err)
            _, t = tls_get({ tls_port = plain.port })
            assert.equal("connection", t.code, t.err)
            assert.matches("TLS handshake failed", t.err)
            -- and the other way round: a plain connection to a TLS port
            ngx_server:expect_error("&plain=1 HTTP") -- nginx logs the reset
            _, t = tls_get(plain, "&plain=1")
            assert.equal("connection", t.code, t.err)
            assert.matches("127%.0%.0%.1:" .. plain.tls_port .. ": lost the connection .*the server may want TLS "
                .. "%(rediss://%)", t.err)
            -- verify off: the name no longer matters
            _, t = tls_get(plain, "&name=wrong.example&insecure=1")
            assert.matches("^%x+$", t.token or "", t.err)
        end)

        it("refuses a server whose certificate nginx's CAs do not know (lua_ssl_trusted_certificate)", function()
            local key = helper.key("tls")
            local body = ngx_server:get(string.format("/tls_other_ca?port=%d&key=%s&name=localhost",
                stranger.port, key))
            local t = lines(body)
            assert.equal("connection", t.code, body .. table.concat(ngx_server:errors(), "\n"))
            assert.matches("^connection: 127%.0%.0%.1:" .. stranger.port .. ": TLS handshake failed %(", t.err)
            assert.equal("0", stranger:cli("EXISTS", key))
        end)

        -- the error log, without nginx's own lines for the handshakes that
        -- the refusal tests make fail on purpose
        local function errors()
            local out = {}
            for _, line in ipairs(ngx_server:errors()) do
                if not line:find("lua ssl certificate", 1, true) then out[#out + 1] = line end
            end
            return out
        end

        local function api(ports, extra)
            local key = helper.key("tls")
            local body, code = ngx_server:get(string.format("/tls_api?ports=%s&key=%s&name=localhost&ca=%s%s",
                table.concat(ports, ","), key, certs.ca, extra or ""))
            assert.equal(200, code, body)
            local t = lines(body)
            assert.same({ acquire = "ok", again = "locked", extend = "ok", release = "ok",
                release_again = "not owner", with_lock = "locked", after = "free", transport = "cosocket" }, t)
            return key
        end

        it("runs the lock API over TLS only (no plaintext port): one server, with a client certificate, "
            .. "and Redlock over 3 with renewal from the C thread", function()
            api({ only[1].port })
            api({ mutual.tls_port }, string.format("&cert=%s&pkey=%s", certs.client_crt, certs.client_key))
            local key = api({ only[1].port, only[2].port, only[3].port }, "&renew=1")
            for _, s in ipairs(only) do assert.equal("0", s:cli("EXISTS", key)) end
            assert.same({}, errors())
        end)

        it("a release wakes a waiter over TLS: the worker's subscriber handshakes too", function()
            local key = helper.key("notified")
            local holder = require("redlock").new { servers = { only[2]:tls_url() }, tls = { ca_file = certs.ca } }
            local lock = assert(holder:acquire("lock:" .. key, { ttl = 5000 }))
            local q = string.format("/notified?key=%s&tls_port=%d&name=localhost", key, only[2].port)
            -- the first waiter starts the worker's subscriber (on the TLS-only server), and polls
            assert.matches("^timeout", (ngx_server:get(q .. "&wait=50")))
            -- this one's polling would sleep 10 s, past its wait of 3 s
            local waiter = ngx_server:bg(q .. "&wait=3000&hold=0")
            helper.sleep(300)
            assert.is_true(lock:release())
            assert.equal("taken", (waiter.wait()))
            holder:close()
            assert.same({}, errors())
        end)
    end)

    describe("Sentinel", function()
        local master, replica, sentinels, url
        local function evalsha_calls(server)
            return tonumber(server:cli("INFO", "commandstats"):match("cmdstat_evalsha:calls=(%d+)")) or 0
        end
        setup(function()
            master = helper.start_server()
            replica = helper.start_replica(master)
            sentinels = {}
            local addrs = {}
            for i = 1, 3 do
                sentinels[i] = helper.start_sentinel({ mymaster = master })
                addrs[i] = "127.0.0.1:" .. sentinels[i].port
            end
            url = "redis+sentinel://" .. table.concat(addrs, ",") .. "/mymaster"
            assert(helper.eventually(15000, function()
                for _, s in ipairs(sentinels) do
                    local out = s:cli("SENTINEL", "master", "mymaster")
                    if not out:find("num%-other%-sentinels\n2") or not out:find("num%-slaves\n1") then
                        return false
                    end
                end
                return true
            end), "the sentinels did not discover each other and the replica")
            ngx_server = start(redis, 2, redlock_ports)
        end)
        teardown(function()
            ngx_server:stop()
            ngx_server = nil
        end)

        local function take(name, n, check)
            local key = helper.key("sentinel")
            local u = name and url:gsub("/mymaster$", "/" .. name) or url
            return key, lines((ngx_server:get(string.format("/sentinel?url=%s&key=%s&n=%d%s",
                u:gsub("[^%w]", function(ch) return string.format("%%%02X", ch:byte()) end), key, n or 1,
                check and ("&check=" .. check) or ""))))
        end

        it("takes locks over cosockets on the master the sentinels name, and follows a failover", function()
            local key, t = take()
            assert.equal(master:cli("GET", key), t.token)
            assert.equal("127.0.0.1:" .. master.port, t.master)
            local _
            _, t = take("nosuchmaster")
            assert.equal("connection", t.code)
            assert.matches("master name unknown", t.err)

            assert.matches("^OK", sentinels[1]:cli("SENTINEL", "FAILOVER", "mymaster"))
            local new_addr = "127.0.0.1:" .. replica.port
            assert(helper.eventually(20000, function()
                return sentinels[2]:master_addr("mymaster") == new_addr
            end), "the sentinels did not switch to the replica")
            assert(helper.eventually(8000, function()
                key, t = take()
                return t.token ~= nil and replica:cli("GET", key) == t.token
            end), "locks taken in nginx did not reach the new master")
            assert(helper.eventually(20000, function()
                return master:cli("ROLE"):match("^slave") ~= nil
            end), "the old master was not turned into a replica")
            local old_calls = evalsha_calls(master)
            _, t = take(nil, 20)
            assert.equal(new_addr, t.master)
            assert.equal(old_calls, evalsha_calls(master))
            assert.same({}, ngx_server:errors())
        end)

        it("a worker that reads the master's address from the shared dict checks it when the worker that"
            .. " asked would, not a whole period after its own read", function()
            local key = helper.key("shared")
            local t = lines((ngx_server:get(string.format("/sentinel_shared?url=%s&key=%s&check=2000",
                url:gsub("[^%w]", function(ch) return string.format("%%%02X", ch:byte()) end), key))))
            -- (the second read the dict 1200 ms after the first asked: its
            -- next check is due 800 ms later, with the first's)
            assert.equal("0", t.second, t.err)
            assert.equal(32, #t.mine)
            assert.same({}, ngx_server:errors())
        end)

        -- The master the sentinels name now and its replica, once the
        -- replica is in sync (a failover before swapped them).
        local function roles()
            local old, new = master, replica
            if sentinels[1]:master_addr("mymaster") == "127.0.0.1:" .. replica.port then old, new = replica, master end
            assert(helper.eventually(20000, function()
                return new:cli("INFO", "replication"):find("master_link_status:up", 1, true) ~= nil
            end), "the replica is not in sync")
            return old, new
        end

        -- (after the test above: the roles are swapped)
        it("follows a failover the sentinels announce (+switch-master), without asking them: "
            .. "the old master frozen, locks go to the new one", function()
            local old, new = roles()
            -- clients that ask the sentinels once an hour (the address in
            -- each worker and in the shared dict for that long), in both
            -- workers: each worker subscribes to +switch-master
            for _ = 1, 8 do
                local key, t = take(nil, 1, 3600000)
                assert.equal(old:cli("GET", key), t.token)
            end
            old:freeze()
            old:signal_later(20000, "CONT")
            assert.matches("^OK", sentinels[2]:cli("SENTINEL", "FAILOVER", "mymaster"))
            local new_addr = "127.0.0.1:" .. new.port
            assert(helper.eventually(20000, function()
                for _, s in ipairs(sentinels) do
                    if s:master_addr("mymaster") ~= new_addr then return false end
                end
                return true
            end), "the sentinels did not switch")
            -- (the announcement reaches the workers within moments)
            assert(helper.eventually(3000, function()
                local key, t = take(nil, 1, 3600000)
                return t.token ~= nil and new:cli("GET", key) == t.token
            end), "locks taken in nginx did not reach the new master")
            for _ = 1, 8 do
                local key, t = take(nil, 1, 3600000)
                assert.equal(new:cli("GET", key), t.token, t.err)
                assert.equal(new_addr, t.master)
            end
            old:thaw()
            assert.same({}, ngx_server:errors())
        end)

        it("a waiter's subscriber follows a failover the sentinels announce to the new master, and the "
            .. "waiter takes the lock released there", function()
            local old, new = roles()
            -- (0 also while a server changes role and answers otherwise)
            local function listeners(node)
                return tonumber(node:cli("PUBSUB", "NUMSUB", "redlock:wake"):match("(%d+)%s*$")) or 0
            end
            local key = helper.key("switch_wait")
            local holder = require("redlock").new { servers = { url } }
            local lock = assert(holder:acquire(key, { ttl = 30000 }))
            -- a waiter whose client asks the sentinels once an hour: only the
            -- announcement can move its worker's subscriber
            local waiter = ngx_server:bg(string.format("/cluster_notified?url=%s&key=%s&wait=25000&check=3600000",
                url:gsub("[^%w]", function(ch) return string.format("%%%02X", ch:byte()) end), key), 40)
            assert(helper.eventually(10000, function() return listeners(old) > 0 end),
                "no subscriber on the master")
            assert(helper.eventually(20000, function()
                return sentinels[2]:cli("SENTINEL", "FAILOVER", "mymaster"):match("^OK") ~= nil
            end), "the sentinel refused the failover")
            assert(helper.eventually(20000, function() return listeners(new) > 0 end),
                "the worker's subscriber did not move to the new master")
            assert(helper.eventually(20000, function() return old:cli("ROLE"):match("^slave") ~= nil end),
                "the old master was not turned into a replica")
            assert.is_true(lock:release())
            local out = waiter.wait()
            assert.matches("^taken", out)
            holder:close()
            assert.same({}, ngx_server:errors())
        end)
    end)
    -- Legacy mode's bare recipe (MULTI renamed away: SETNX, GET, GETSET,
    -- DEL as separate commands) over Sentinel: every step of an operation
    -- goes on the connection its first step took, as with hiredis' one
    -- connection, never on another that reaches the new master.
    describe("legacy mode over Sentinel, without MULTI", function()
        local master, replica, sentinel
        -- (the sentinel runs its failover in MULTI: it is told the new name)
        local NO_MULTI = { "rename-command MULTI MULTI-renamed" }
        setup(function()
            master = helper.start_server { config = NO_MULTI }
            replica = helper.start_replica(master, { config = NO_MULTI })
            sentinel = helper.start_sentinel({ legacy = master },
                { quorum = 1, config = { "sentinel rename-command legacy MULTI MULTI-renamed" } })
            assert(helper.eventually(15000, function()
                return sentinel:cli("SENTINEL", "master", "legacy"):find("num%-slaves\n1") ~= nil
            end), "the sentinel did not discover the replica")
            ngx_server = start(redis, 1, redlock_ports)
        end)
        teardown(function()
            ngx_server:stop()
            ngx_server = nil
        end)

        it("a release's step after a failover is not sent to the new master, where another holder has the key",
            function()
            local key, flag = helper.key("legacy_switch"), helper.key("flag")
            local url = ("redis+sentinel://127.0.0.1:" .. sentinel.port .. "/legacy")
                :gsub("[^%w]", function(ch) return string.format("%%%02X", ch:byte()) end)
            local release = ngx_server:bg(string.format("/legacy_switch?url=%s&key=%s&flag=%s", url, key, flag), 90)
            -- its GET answered (the lock is the bare recipe's: expiry and token)
            assert(helper.eventually(10000, function() return data:command("GET", flag) == "paused" end),
                "the release did not pause")
            assert.matches("^%d+:%x+$", master:cli("GET", key))
            assert(helper.eventually(5000, function() return replica:cli("EXISTS", key) == "1" end))
            -- (NOGOODSLAVE until the sentinel has looked at the replica)
            assert(helper.eventually(20000, function()
                return sentinel:cli("SENTINEL", "FAILOVER", "legacy"):match("^OK") ~= nil
            end), "the sentinel refused the failover")
            assert(helper.eventually(20000, function()
                return master:cli("ROLE"):match("^slave") ~= nil
                    and sentinel:master_addr("legacy") == "127.0.0.1:" .. replica.port
            end), "the failover did not happen")
            assert.equal("OK", replica:cli("SET", key, "other-holder"))
            data:command("SET", flag, "go")
            local out, code = release.wait()
            assert.equal(200, code, out)
            local t = lines(out)
            -- (the DEL goes nowhere: the connection of the GET is a replica's now)
            assert.equal("connection", t.release, t.err)
            assert.equal("other-holder", replica:cli("GET", key))
            data:command("DEL", flag)
            assert.same({}, ngx_server:errors())
        end)
    end)

    describe("Redis Cluster (3 masters)", function()
        local cluster, store, url
        local function enc(s) return (s:gsub("[^%w]", function(ch) return string.format("%%%02X", ch:byte()) end)) end
        -- a key of the slot whose master is (or is not, with other) node
        local function key_on(node, other, prefix)
            for i = 1, 1000 do
                local key = prefix .. i
                local owner = helper.cluster_owner(cluster, key)
                if (owner == node) ~= (other == true) then return key, owner end
            end
        end
        setup(function()
            cluster = helper.start_cluster(3, 0)
            url = enc(cluster.url)
            store = core.conn(require("redlock.addresses").parse({ cluster.url })[1])
            -- one worker: the notified test's subscriber must be the waiter's
            ngx_server = start(redis, 1, redlock_ports)
        end)
        teardown(function()
            ngx_server:stop()
            ngx_server = nil
            if store then store:close() end
        end)

        it("routes by slot: 100 concurrent increments lose no update, alone and as a Redlock member; "
            .. "replica acknowledgement on the key's master", function()
            increments("/cluster_incr?url=" .. url, 100, store)
            local members = redlock_ports[2] .. "," .. redlock_ports[3]
            increments("/cluster_incr?members=" .. members .. "&url=" .. url, 50, store)
            -- eval_wait went to the key's master (elsewhere: MOVED), whose
            -- WAIT found no replica: refused, and the lock released
            local key = key_on(cluster.nodes[1], true, "rep:")
            local t = lines((ngx_server:get(string.format("/cluster_try?url=%s&key=%s&replicas=1", url, key))))
            assert.equal("replicas", t.code, t.err)
            assert.matches("0 of 1 replicas", t.err)
            assert.equal(0, store:command("EXISTS", key))
        end)

        -- CLUSTER SLOTS calls, all nodes together
        local function map_loads()
            local n = 0
            for _, node in ipairs(cluster.nodes) do
                n = n + (tonumber(node:cli("INFO", "commandstats"):match("cmdstat_cluster|slots:calls=(%d+)")) or 0)
            end
            return n
        end

        it("loses no update while the slot moves to another master under requests (MOVED, ASK, TRYAGAIN)",
            function()
            local from, slot = helper.cluster_owner(cluster, "mv")
            increments("/cluster_incr?url=" .. url, 20, store, "{mv}a")
            local loads = map_loads()
            local _, to = key_on(from, true, "x")
            -- 30 requests, each holding the lock 20 ms, while the slot moves
            -- as spec/23's reshard moves it: IMPORTING, MIGRATING, the keys
            -- (twice, new ones come through ASK meanwhile), then the slot
            local reqs = {}
            for i = 1, 30 do reqs[i] = ngx_server:bg("/cluster_incr?ms=20&key=%7Bmv%7Db&url=" .. url) end
            helper.sleep(100)
            helper.move_slot(cluster, slot, from, to, 100)
            local seen = {}
            for i = 1, 30 do
                local body, code = reqs[i].wait()
                assert.equal(200, code, body)
                local v = tonumber(body)
                assert.is_nil(seen[v], "value " .. tostring(v) .. " answered twice")
                seen[v] = true
            end
            assert.equal(to, (helper.cluster_owner(cluster, "{mv}a")))
            assert.equal("20", to:cli("GET", "{mv}a"))
            assert.equal("30", to:cli("GET", "{mv}b"))
            -- later requests reach the new master: the workers' maps named
            -- the old one, and MOVED made them reload (met by the requests
            -- above if the slot moved while they ran, else by these: on a
            -- busy machine the 30 may all end before the hand-over)
            increments("/cluster_incr?url=" .. url, 20, store, "{mv}c")
            assert.equal("20", to:cli("GET", "{mv}c"))
            assert.is_true(map_loads() > loads)
        end)

        it("locks over the C core's Cluster connection where nginx has no cosockets (set_by_lua)", function()
            local key, owner = key_on(cluster.nodes[1], true, "set:")
            local t = lines((ngx_server:get(string.format("/cluster_set?url=%s&key=%s", url, key))))
            -- (no cosockets in the set phase: only hiredis could do it)
            assert.equal("set", t.phase, t.err)
            assert.equal(t.token, owner:cli("GET", key))
            assert.same({}, ngx_server:errors())
        end)

        it("wakes a waiter through a subscriber on another node (PUBLISH reaches every node)", function()
            -- the subscriber listens on the first seed; the key lives elsewhere
            local key, owner = key_on(cluster.nodes[1], true, "notified:")
            local holder = require("redlock").new { servers = cluster.url }
            local lock = assert(holder:acquire(key, { ttl = 5000 }))
            local q = string.format("/cluster_notified?url=%s&key=%s", url, key)
            -- the first waiter starts the worker's subscriber, and polls
            assert.matches("^timeout", (ngx_server:get(q .. "&wait=50")))
            local function subscribers(node)
                return tonumber(node:cli("PUBSUB", "NUMSUB", "redlock:wake"):match("\n(%d+)"))
            end
            assert(helper.eventually(2000, function() return subscribers(cluster.nodes[1]) == 1 end))
            assert.equal(0, subscribers(owner))
            -- this one's polling would sleep 10 s, past its wait of 3 s
            local waiter = ngx_server:bg(q .. "&wait=3000")
            helper.sleep(300)
            assert.is_true(lock:release())
            assert.equal("taken", (waiter.wait()))
            holder:close()
            assert.same({}, ngx_server:errors())
        end)

        it("gives the documented errors for a bad seed list, and gets past a dead seed", function()
            local t = lines((ngx_server:get("/cluster_try?key=k&url=" .. enc("redis+cluster://127.0.0.1:1,127.0.0.1:2"))))
            assert.equal("connection", t.code, t.err)
            assert.matches("no cluster node reachable", t.err)
            assert.matches("127.0.0.1:2", t.err, 1, true)
            t = lines((ngx_server:get("/cluster_try?key=k&url=" .. enc("redis+cluster://127.0.0.1:" .. redis.port))))
            assert.equal("server", t.code, t.err)
            assert.matches("not a cluster node", t.err)
            -- a dead seed first: the map comes from the next one
            local key, owner = key_on(cluster.nodes[2], true, "seed:")
            t = lines((ngx_server:get(string.format("/cluster_try?key=%s&url=%s", key,
                enc("redis+cluster://127.0.0.1:1," .. cluster.seeds[2])))))
            assert.equal(owner:cli("GET", key), t.token, t.err)
            -- nginx logs the refused connects made on purpose, nothing else
            local out = {}
            for _, line in ipairs(ngx_server:errors()) do
                if not line:find("connect() failed (111", 1, true) then out[#out + 1] = line end
            end
            assert.same({}, out)
        end)
    end)
end)
