-- Faults: servers killed, frozen, restarted or dropping us in the middle of
-- calls. Every case ends within the configured timeouts with a precise
-- error, no crash, no hang, and no lock held past its ttl.
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"

local function elapsed_since(t0) return core.now() - t0 end

-- The key is gone once its ttl has passed: nothing is held forever.
local function expires(server, key, ttl)
    helper.sleep(ttl + 100)
    assert.equal("0", server:cli("EXISTS", key))
end

describe("faults", function()
    teardown(function() helper.stop_all() end)

    it("server killed while acquire waits: 'connection' naming it, at once", function()
        local server = helper.start_server()
        local holder = redlock.new { servers = { server:url() } }
        local waiter = redlock.new { servers = { server:url() }, connect_timeout = 300, timeout = 300 }
        local key = helper.key()
        assert(holder:acquire(key))
        server:signal_later(300, "KILL")
        local t0 = core.now()
        local lock, err, code = waiter:acquire(key, { wait = 10000 })
        local took = elapsed_since(t0)
        assert.is_nil(lock)
        assert.equal("connection", code)
        assert.matches("^connection: 127%.0%.0%.1:" .. server.port, err)
        assert.is_true(took < 3000, "took " .. took)
        holder:close()
        waiter:close()
        server:stop()
    end)

    it("server killed during with_lock: fn ran, with_lock reports 'connection'", function()
        local server = helper.start_server()
        local client = redlock.new { servers = { server:url() }, connect_timeout = 300 }
        local ran = false
        local ok, err, code = client:with_lock(helper.key(), function()
            ran = true
            server:kill()
            return "result"
        end)
        assert.is_true(ran)
        assert.is_nil(ok)
        assert.equal("connection", code)
        assert.matches("releasing", err)
        client:close()
    end)

    it("server restarted with its data gone between acquire and release: 'not owner', and the key is free",
        function()
            local server = helper.start_server()
            local client = redlock.new { servers = { server:url() } }
            local key = helper.key()
            local lock = assert(client:acquire(key, { ttl = 60000 }))
            server:restart()
            local ok, _, code = lock:release()
            assert.is_nil(ok)
            assert.equal("not owner", code)
            local again = assert(client:try_acquire(key))
            assert.is_true(again:release())
            client:close()
            server:stop()
        end)

    it("release against a frozen server times out with 'connection', and the lock still expires", function()
        local server = helper.start_server()
        local client = redlock.new { servers = { server:url() }, timeout = 200 }
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 800 }))
        server:freeze()
        local t0 = core.now()
        local ok, err, code = lock:release()
        local took = elapsed_since(t0)
        server:thaw()
        -- the frozen server may run the queued release once thawed; either way
        -- the key must be gone within the ttl
        assert.is_nil(ok)
        assert.equal("connection", code)
        assert.matches("timed out after 200 ms", err)
        assert.is_true(took < 1500, "took " .. took)
        expires(server, key, 800)
        client:close()
        server:stop()
    end)

    it("extend against a frozen server times out, and never deletes the lock", function()
        local server = helper.start_server()
        local client = redlock.new { servers = { server:url() }, timeout = 200 }
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 5000 }))
        server:freeze()
        local ok, _, code = lock:extend(6000)
        server:thaw()
        assert.is_nil(ok)
        assert.equal("connection", code)
        assert.equal(lock.token, server:cli("GET", key))
        assert.is_true(lock:release())
        client:close()
        server:stop()
    end)

    it("a waiter whose connection is killed (CLIENT KILL) carries on and gets the lock", function()
        local server = helper.start_server()
        local holder = redlock.new { servers = { server:url() } }
        local waiter = redlock.new { servers = { server:url() }, retry_delay = 20 }
        local key = helper.key()
        local lock = assert(holder:acquire(key, { ttl = 1000 }))
        helper.later(200, string.format("redis-cli -p %d CLIENT KILL TYPE normal", server.port))
        local got = assert(waiter:acquire(key, { wait = 5000 }))
        assert.is_true(got:release())
        local _, _, code = lock:release()
        assert.equal("not owner", code)
        holder:close()
        waiter:close()
        server:stop()
    end)

    it("a server frozen past the timeout during acquire leaves no lock beyond its ttl", function()
        local server = helper.start_server()
        local client = redlock.new { servers = { server:url() }, timeout = 150 }
        local key = helper.key()
        server:freeze()
        server:signal_later(400, "CONT")
        local lock, _, code = client:try_acquire(key, { ttl = 700 })
        assert.is_nil(lock)
        assert.equal("connection", code)
        helper.sleep(300)
        -- the queued acquire ran after the thaw; it must carry its ttl
        local pttl = tonumber(server:cli("PTTL", key))
        assert.is_true(pttl == -2 or (pttl > 0 and pttl <= 700), "pttl " .. tostring(pttl))
        expires(server, key, 700)
        client:close()
        server:stop()
    end)

    describe("safety invariant under churn", function()
        -- Holds that the library reported valid from acquire until after the
        -- write never overlap in time, and every such write is still in the
        -- counter, while the lock server restarts (keeping its data: a single
        -- server that loses data can admit two holders, as docs/guarantees.md states).
        local function check_logs(logs)
            local holds, confirmed = {}, 0
            for _, path in ipairs(logs) do
                for line in io.lines(path) do
                    local got, checked, conf, counted = line:match("^(%S+) (%S+) (%d) (%d)$")
                    if counted == "1" then
                        holds[#holds + 1] = { got = tonumber(got), checked = tonumber(checked) }
                    end
                    if conf == "1" then confirmed = confirmed + 1 end
                end
            end
            table.sort(holds, function(a, b) return a.got < b.got end)
            local last = -math.huge
            for _, h in ipairs(holds) do
                assert.is_true(h.got >= last,
                    string.format("two holders at once: one got the lock at %.3f, another held it until %.3f",
                        h.got, last))
                last = h.checked
            end
            return #holds, confirmed
        end

        local function churn(mode, n_servers)
            local lock_servers, urls = {}, {}
            for i = 1, n_servers do
                lock_servers[i] = helper.start_server { persistent = true }
                urls[i] = lock_servers[i]:url()
            end
            local data = helper.start_server()
            local lock_key, counter_key = helper.key("churn"), helper.key("counter")
            local workers, logs = {}, {}
            for i = 1, 3 do
                logs[i] = helper.fresh_dir("churn") .. "/log"
                workers[i] = helper.spawn("spec/workers/churn.lua", table.concat(urls, ","), lock_key,
                    data:url(), counter_key, 5000, mode, logs[i])
            end
            for _ = 1, 3 do
                helper.sleep(1000)
                lock_servers[1]:restart()
            end
            for i = 1, 3 do
                local status, out = workers[i]:wait(60000)
                assert.equal(0, status, out)
            end
            local counted, confirmed = check_logs(logs)
            local value = tonumber(data:cli("GET", counter_key)) or 0
            assert.equal(counted, value)
            assert.is_true(counted > 10 and confirmed > 10, "too few holds to mean anything: " .. counted)
            for _, s in ipairs(lock_servers) do s:stop() end
            data:stop()
        end

        it("script mode, one server restarted three times", function() churn("script", 1) end)
        it("legacy mode, one server restarted three times", function() churn("legacy", 1) end)
        it("Redlock over 3 servers, one restarted three times", function() churn("script", 3) end)
    end)
end)
