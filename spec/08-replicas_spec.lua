-- Replica acknowledgement (issue 23): replicas = N makes acquire and extend
-- wait until N replicas have the lock's write (WAIT, sent with the script),
-- and fail closed when they do not. Real masters with real replicas
-- (redis-server --replicaof), frozen with SIGSTOP where a test needs a
-- replica that does not answer.
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"

local skip = helper.lua54_only()

-- Whatever the library could have left on a master for key: the lock key,
-- its waiting keys (docs/storage.md).
local function leftovers(server, key)
    local out = {}
    for _, k in ipairs({ key, "{" .. key .. "}:waiters", "{" .. key .. "}:waiting", "{" .. key .. "}:wake" }) do
        if server:cli("EXISTS", k) ~= "0" then out[#out + 1] = k end
    end
    return table.concat(out, " ")
end

-- Runs fn with the replica frozen (SIGSTOP); thaws it afterwards, also
-- when fn fails, and raises fn's error again.
local function frozen(replica, fn)
    replica:freeze()
    local ok, err = pcall(fn)
    replica:thaw()
    if not ok then error(err, 0) end
end

describe("replica acknowledgement: options", function()
    local function raises(pattern, fn)
        local ok, err = pcall(fn)
        assert.is_false(ok)
        assert.truthy(tostring(err):find(pattern, 1, true), tostring(err))
    end

    it("checks replicas, replica_timeout and aof in new and per call", function()
        raises("bad option 'replicas' to 'new' (integer from 0 to 1000000 expected, got -1)",
            function() redlock.new { replicas = -1 } end)
        raises("bad option 'replicas' to 'new'", function() redlock.new { replicas = 1.5 } end)
        raises("bad option 'replicas' to 'new'", function() redlock.new { replicas = "1" } end)
        raises("bad option 'replica_timeout' to 'new' (integer from 1 to 86400000 (ms) expected, got 0)",
            function() redlock.new { replica_timeout = 0 } end)
        raises("bad option 'aof' to 'new' (boolean expected, got 1)", function() redlock.new { aof = 1 } end)
        local client = redlock.new { servers = { "redis://127.0.0.1:1" } }
        raises("bad option 'replicas' to 'acquire'", function() client:acquire("k", { replicas = -2 }) end)
        raises("bad option 'replica_timeout' to 'try_acquire'",
            function() client:try_acquire("k", { replica_timeout = 1.5 }) end)
        raises("bad option 'aof' to 'with_lock'",
            function() client:with_lock("k", { aof = "yes" }, function() end) end)
        client:close()
    end)
end)

describe("replica acknowledgement, one master with a replica", function()
    if skip then
        pending("skipped: " .. skip)
        return
    end
    local master, replica, client, data

    setup(function()
        master = helper.start_server()
        replica = helper.start_replica(master)
        data = core.conn(master:spec())
        -- (a replica's acknowledgement takes a few ms, more on a loaded host)
        client = redlock.new { servers = { master:url() }, replicas = 1, replica_timeout = helper.ms(300),
            retry_delay = 10, retry_jitter = 5 }
    end)
    teardown(function()
        if replica then replica:thaw() end
        if client then client:close() end
        if data then data:close() end
        helper.stop_all()
    end)

    it("takes the lock once the replica has it, and says how many acknowledged", function()
        local key = helper.key("rep")
        local lock, err = client:acquire(key)
        assert.is_truthy(lock, err)
        assert.is_true(lock.replicas >= 1)
        -- WAIT returned: the replica has the key with our token
        assert.equal(lock.token, replica:cli("GET", key))
        assert.is_true(lock:release())
    end)

    it("gives lock.replicas = 0 when nothing was waited for", function()
        local key = helper.key("rep")
        local lock = assert(client:acquire(key, { replicas = 0 }))
        assert.equal(0, lock.replicas)
        assert.is_true(lock:release())
    end)

    it("fails closed with the replica stopped: code replicas, and no key left on the master", function()
        local key = helper.key("rep")
        frozen(replica, function()
            local lock, err, code = client:acquire(key)
            assert.is_nil(lock)
            assert.equal("replicas", code)
            assert.truthy(err:find("^replicas: 127%.0%.0%.1:" .. master.port .. ": 0 of 1 replicas"), err)
            assert.truthy(err:find("within " .. helper.ms(300) .. " ms", 1, true), err)
            assert.truthy(err:find("the lock was released", 1, true), err)
            assert.equal("", leftovers(master, key))
            -- a waiter too (notified waiting keys), and try_acquire
            lock, err, code = client:try_acquire(key)
            assert.is_nil(lock)
            assert.equal("replicas", code, err)
            assert.equal("", leftovers(master, key))
        end)
        -- back: the same key is free and is taken
        local lock = assert(client:acquire(key))
        assert.is_true(lock:release())
    end)

    it("releases a waiter's lock that the replica did not acknowledge, waking nobody wrongly", function()
        local key = helper.key("rep")
        local other = redlock.new { servers = { master:url() } }
        local held = assert(other:acquire(key, { ttl = 300 }))
        frozen(replica, function()
            -- waits for the holder's expiry, takes the key, then fails closed
            local lock, err, code = client:acquire(key, { wait = 2000 })
            assert.is_nil(lock)
            assert.equal("replicas", code, err)
            assert.equal("", leftovers(master, key))
        end)
        assert.is_nil((held:release()))
        other:close()
    end)

    it("extends with the replica, and keeps the old validity when it does not acknowledge", function()
        local key = helper.key("rep")
        local lock = assert(client:acquire(key, { ttl = 5000 }))
        assert.is_true(lock:extend(8000))
        assert.is_true(lock.replicas >= 1)
        assert.is_true(lock:remaining() > 5000)
        local before = lock:remaining()
        frozen(replica, function()
            local ok, err, code = lock:extend(60000)
            assert.is_nil(ok)
            assert.equal("replicas", code)
            assert.truthy(err:find("0 of 1 replicas acknowledged the extension", 1, true), err)
            assert.truthy(err:find("keeps its previous validity", 1, true), err)
            -- never more validity than acknowledged
            assert.is_true(lock:remaining() <= before)
            assert.is_false((lock:lost()))
        end)
        assert.is_true(lock:release())
        assert.equal("", leftovers(master, key))
    end)

    it("with_lock waits for the replica too", function()
        local key = helper.key("rep")
        local seen
        assert.is_true(client:with_lock(key, { renew = false }, function(lock) seen = lock.replicas end))
        assert.is_true(seen >= 1)
        frozen(replica, function()
            local called = false
            local ok, err, code = client:with_lock(key, { renew = false }, function() called = true end)
            assert.is_nil(ok)
            assert.equal("replicas", code, err)
            assert.is_false(called)
        end)
        assert.equal("", leftovers(master, key))
    end)

    it("renews in the background with the replica, and lets the lock expire without it", function()
        local key = helper.key("rep")
        local lock = assert(client:acquire(key, { ttl = helper.ms(900), renew = true }))
        helper.sleep(helper.ms(1500)) -- past the ttl: only acknowledged renewals kept it
        assert.is_false((lock:lost()))
        assert.is_true(lock:remaining() > 0)
        assert.equal(lock.token, replica:cli("GET", key))
        frozen(replica, function()
            -- renewals now extend the master's key but are not acknowledged:
            -- the lock's validity is not extended, and it runs out
            assert.is_true(helper.eventually(helper.ms(3000), function() return (lock:lost()) end))
            local _, why = lock:lost()
            assert.equal("expired", why)
            assert.equal(0, lock:remaining())
        end)
        -- the master may still hold our token (unacknowledged renewals):
        -- the release deletes it then, else says "not owner"
        local ok, err, code = lock:release()
        assert.is_true(ok == true or code == "not owner", err)
        assert.equal("", leftovers(master, key))
    end)

    it("asks for more replicas than there are: fails closed at once with the counts", function()
        local key = helper.key("rep")
        local lock, err, code = client:acquire(key, { replicas = 2, replica_timeout = 100 })
        assert.is_nil(lock)
        assert.equal("replicas", code)
        assert.truthy(err:find("1 of 2 replicas acknowledged the lock within 100 ms", 1, true), err)
        assert.equal("", leftovers(master, key))
    end)

    it("aof = true on Redis before 7.2: a clear server error at the first use, no key left", function()
        local version = tonumber((data:command("INFO", "server"):match("redis_version:(%d+%.%d+)")))
        local key = helper.key("rep")
        local lock, err, code = client:acquire(key, { aof = true })
        if version and version >= 7.2 then
            -- WAITAOF exists: the master has no AOF here, which WAITAOF 1 refuses
            assert.is_nil(lock)
            assert.equal("server", code, err)
        else
            assert.is_nil(lock)
            assert.equal("server", code)
            assert.truthy(err:find("WAITAOF needs Redis 7.2+", 1, true), err)
            assert.truthy(err:find("127.0.0.1:" .. master.port, 1, true), err)
        end
        assert.equal("", leftovers(master, key))
        -- the same client still locks without aof: nothing was switched
        local l = assert(client:acquire(key))
        assert.is_true(l:release())
    end)

    it("refuses replicas in legacy mode instead of locking unacknowledged", function()
        local legacy = redlock.new { servers = { master:url() }, mode = "legacy", replicas = 1 }
        local key = helper.key("rep")
        local lock, err, code = legacy:acquire(key)
        assert.is_nil(lock)
        assert.equal("server", code)
        assert.truthy(err:find("need script mode", 1, true), err)
        assert.equal("", leftovers(master, key))
        legacy:close()
    end)

    it("the CLI: --replicas and --replica-timeout, exit 69 when the replica does not acknowledge", function()
        local key = helper.key("rep")
        local function cli(...)
            local out = helper.read_cmd(helper.lua_cmd("bin/redlock", ...) .. " 2>&1; echo \"exit=$?\"")
            return out, tonumber(out:match("exit=(%d+)"))
        end
        local out, status = cli("acquire", "--server", master:url(), "--replicas", "1", "--ttl", "60s", key)
        assert.equal(0, status, out)
        local token = out:match("^(%x+)\n")
        assert.equal(token, replica:cli("GET", key))
        out, status = cli("release", "--server", master:url(), "--replicas", "1", key, token)
        assert.equal(0, status, out)
        frozen(replica, function()
            out, status = cli("acquire", "--server", master:url(), "--replicas", "1",
                "--replica-timeout", "200ms", key)
            assert.equal(69, status, out)
            assert.truthy(out:find("replicas: 127.0.0.1:" .. master.port .. ": 0 of 1 replicas", 1, true), out)
            assert.equal("", leftovers(master, key))
        end)
        out, status = cli("acquire", "--replicas", "-1", key)
        assert.equal(64, status, out)
        assert.truthy(out:find("--replicas: expected 0 to 1000000, got '-1'", 1, true), out)
    end)

    it("survives a flushed script cache (NOSCRIPT: EVAL and WAIT again)", function()
        assert.equal("OK", master:cli("SCRIPT", "FLUSH"))
        local key = helper.key("rep")
        local lock, err = client:acquire(key)
        assert.is_truthy(lock, err)
        assert.is_true(lock.replicas >= 1)
        assert.is_true(lock:release())
    end)
end)

describe("replica acknowledgement with Redlock over 3 masters, each with a replica", function()
    if skip then
        pending("skipped: " .. skip)
        return
    end
    local masters, replicas, urls, client = {}, {}, {}, nil

    setup(function()
        for i = 1, 3 do
            masters[i] = helper.start_server()
            replicas[i] = helper.start_replica(masters[i])
            urls[i] = masters[i]:url()
        end
        client = redlock.new { servers = urls, replicas = 1, replica_timeout = helper.ms(300),
            server_timeout = 500, retry_delay = 10, retry_jitter = 5 }
    end)
    teardown(function()
        for _, r in ipairs(replicas) do r:thaw() end
        if client then client:close() end
        helper.stop_all()
    end)

    it("counts a server only when its replica acknowledged", function()
        local key = helper.key("rep")
        local lock, err = client:acquire(key)
        assert.is_truthy(lock, err)
        assert.is_true(lock.replicas >= 1)
        assert.is_true(lock:extend(8000))
        assert.is_true(lock.replicas >= 1)
        -- one replica frozen: the other two servers still make a majority
        frozen(replicas[3], function()
            local l2, err2 = client:acquire(helper.key("rep"))
            assert.is_truthy(l2, err2)
            assert.is_true(l2:release())
        end)
        assert.is_true(lock:release())
    end)

    it("renews in the background, each server's extend acknowledged", function()
        local key = helper.key("rep")
        local lock = assert(client:acquire(key, { ttl = helper.ms(900), renew = true }))
        helper.sleep(helper.ms(1500))
        assert.is_false((lock:lost()))
        assert.is_true(lock:release())
        for i = 1, 3 do assert.equal("", leftovers(masters[i], key)) end
    end)

    it("fails with no quorum, naming the servers and counts, and leaves no key anywhere", function()
        local key = helper.key("rep")
        frozen(replicas[2], function()
            frozen(replicas[3], function()
                local lock, err, code = client:acquire(key, { wait = 0 })
                assert.is_nil(lock)
                assert.equal("no quorum", code)
                assert.truthy(err:find(masters[2].port .. ": error: replicas: 0 of 1 replicas", 1, true), err)
                assert.truthy(err:find(masters[3].port .. ": error: replicas: 0 of 1 replicas", 1, true), err)
                for i = 1, 3 do assert.equal("", leftovers(masters[i], key)) end
            end)
        end)
    end)

    it("aof = true on Redis before 7.2: a server error naming WAITAOF", function()
        local version = tonumber((masters[1]:cli("INFO", "server"):match("redis_version:(%d+%.%d+)")))
        if version and version >= 7.2 then return end
        local key = helper.key("rep")
        local lock, err, code = client:acquire(key, { aof = true, wait = 0 })
        assert.is_nil(lock)
        assert.equal("server", code)
        assert.truthy(err:find("WAITAOF needs Redis 7.2+", 1, true), err)
        for i = 1, 3 do assert.equal("", leftovers(masters[i], key)) end
    end)
end)

describe("replica acknowledgement inside nginx (cosockets)", function()
    local nginx = require "openresty.nginx"
    local missing = skip or nginx.missing()
    if missing then
        pending("skipped: " .. missing)
        return
    end
    local masters, replicas, ports, ngx_server = {}, {}, {}, nil

    local function lines(body)
        local t = {}
        for k, v in (body or ""):gmatch("([%w_]+)=([^\n]*)") do t[k] = v end
        return t
    end

    local function get(list, key, extra)
        local body, code = ngx_server:get(string.format("/replicas?ports=%s&key=%s&n=1&ms=300%s",
            table.concat(list, ","), key, extra or ""))
        assert.equal(200, code, body)
        return lines(body)
    end

    setup(function()
        assert(io.open("build/jit/redlock/core.so"), "build/jit's core is missing: run `make build-jit`"):close()
        for i = 1, 3 do
            masters[i] = helper.start_server()
            replicas[i] = helper.start_replica(masters[i])
            ports[i] = masters[i].port
        end
        ngx_server = nginx.start { workers = 1, redis = masters[1], lua_path = "@REPO@/spec/openresty/?.lua;",
            server = [[
        location = /replicas { content_by_lua_block { require("probe").replicas() } }
        location = /garbled { content_by_lua_block { require("probe").garbled() } }]],
            init = string.format('require("probe").init { %s }', table.concat(ports, ", ")) }
    end)
    teardown(function()
        for _, r in ipairs(replicas) do r:thaw() end
        if ngx_server then ngx_server:stop() end
        helper.stop_all()
    end)

    it("waits for the replica over a cosocket, and fails closed without it", function()
        local key = helper.key("rep")
        local t = get({ ports[1] }, key)
        assert.equal("1", t.replicas, t.err)
        assert.equal("ok", t.extend)
        assert.equal("1", t.extended_replicas)
        assert.equal("ok", t.release)
        frozen(replicas[1], function()
            t = get({ ports[1] }, key)
            assert.equal("replicas", t.code, t.err)
            assert.truthy(t.err:find("0 of 1 replicas acknowledged the lock within 300 ms", 1, true), t.err)
            assert.equal("", leftovers(masters[1], key))
        end)
        t = get({ ports[1] }, key, "&aof=1")
        assert.equal("server", t.code, t.err)
        assert.truthy(t.err:find("WAITAOF needs Redis 7.2+", 1, true), t.err)
        assert.equal("", leftovers(masters[1], key))
        assert.same({}, ngx_server:errors())
    end)

    -- A reply the reader refuses (a stream corrupted on its way; no Redis
    -- sends one) in WAIT's place: the connection is dropped, never pooled
    -- out of step with its reader; the lock, not known to be acknowledged,
    -- is released, as by conn:eval_wait.
    it("a garbled WAIT reply: the connection dropped, the lock released", function()
        local key = helper.key("garbled")
        local body, code = ngx_server:get(string.format("/garbled?port=%d&replicas=1&key=%s", ports[1], key))
        assert.equal(200, code, body)
        local t = lines(body)
        assert.equal("connection", t.code, t.err)
        assert.truthy(t.err:find("the lock was released", 1, true), t.err)
        assert.equal("true", t.in_step)
        assert.equal("", leftovers(masters[1], key))
        assert.same({}, ngx_server:errors())
    end)

    it("Redlock's fan-out in light threads counts only acknowledged servers", function()
        local key = helper.key("rep")
        local t = get(ports, key)
        assert.equal("1", t.replicas, t.err)
        assert.equal("ok", t.extend)
        assert.equal("ok", t.release)
        frozen(replicas[2], function()
            frozen(replicas[3], function()
                t = get(ports, key)
                assert.equal("no quorum", t.code, t.err)
                assert.truthy(t.err:find("error: replicas: 0 of 1 replicas", 1, true), t.err)
                for i = 1, 3 do assert.equal("", leftovers(masters[i], key)) end
            end)
        end)
        assert.same({}, ngx_server:errors())
    end)
end)
