-- The pitfalls of the field, each as a named spec. Every one of these has
-- shipped in some lock library.
local helper = require "helper"
local redlock = require "redlock"

describe("pitfalls", function()
    local server, client, data
    setup(function() server, client, data = helper.single_server({ retry_jitter = 0 }) end)
    teardown(function() helper.close_all(client, data) end)

    it("release after expiry must not touch the next holder's key", function()
        local key = helper.key()
        local old = assert(client:acquire(key, { ttl = 50 }))
        helper.sleep(150)
        local new = assert(client:acquire(key, { ttl = 10000 }))
        local ok, _, code = old:release()
        assert.is_nil(ok)
        assert.equal("not owner", code)
        assert.equal(new.token, data:command("GET", key))
        assert.is_true(new:release())
    end)

    it("extend after expiry must not touch the next holder's key", function()
        local key = helper.key()
        local old = assert(client:acquire(key, { ttl = 50 }))
        helper.sleep(150)
        local new = assert(client:acquire(key, { ttl = 3000 }))
        local ok, _, code = old:extend(60000)
        assert.is_nil(ok)
        assert.equal("not owner", code)
        assert.equal(new.token, data:command("GET", key))
        assert.is_true(data:command("PTTL", key) <= 3000, "the old holder extended the new lock")
        assert.is_true(new:release())
    end)

    it("tokens come from the OS and never repeat, even across processes started together", function()
        local workers, draws = {}, helper.draws(5000)
        for i = 1, 4 do workers[i] = helper.spawn("spec/workers/tokens.lua", draws) end
        local seen, n = {}, 0
        for i = 1, 4 do
            local status, out = workers[i]:wait(60000)
            assert.equal(0, status, out)
            for t in out:gmatch("[^\n]+") do
                assert.matches("^[0-9a-f]+$", t)
                assert.equal(32, #t)
                assert.is_nil(seen[t], "token repeated: " .. t)
                seen[t] = true
                n = n + 1
            end
        end
        assert.equal(4 * draws, n)
    end)

    it("acquire is one atomic step: one command, and the key never exists without a ttl", function()
        local monitor_dir = helper.fresh_dir("monitor")
        local out = monitor_dir .. "/monitor.log"
        os.execute(string.format("timeout 3 redis-cli -p %d MONITOR >%s 2>&1 &", server.port, out))
        helper.sleep(300)
        local key = helper.key("atomic")
        local lock = assert(client:acquire(key))
        helper.sleep(300)
        local f = assert(io.open(out))
        local log = f:read("*a")
        f:close()
        local from_client, set_line = 0, nil
        for line in log:gmatch("[^\n]+") do
            if line:find(key, 1, true) then
                if not line:find("%[%d+ lua%]") then from_client = from_client + 1 end
                if line:find('"SET"') or line:find('"set"') then set_line = line end
            end
        end
        assert.equal(1, from_client, "acquire took more than one command:\n" .. log)
        assert.is_not_nil(set_line, "no SET seen:\n" .. log)
        assert.matches('"PX"', set_line:upper())
        lock:release()
    end)

    it("integer replies are never tested by truthiness (0 is true in Lua)", function()
        -- the release script answers integer 0 for "not ours"; a library that
        -- tested the reply with `if reply then` would report success
        local key = helper.key()
        local lock = assert(client:acquire(key))
        data:command("SET", key, "someone-else")
        assert.equal(0, data:eval("release", 1, key, lock.token))
        local ok, _, code = lock:release()
        assert.is_nil(ok)
        assert.equal("not owner", code)
        ok, _, code = lock:extend()
        assert.is_nil(ok)
        assert.equal("not owner", code)
        assert.equal("someone-else", data:command("GET", key))
    end)

    it("validity is counted from before the request, not from the reply", function()
        local key = helper.key()
        -- freeze the server so the reply comes ~400 ms after the request
        server:freeze()
        server:signal_later(400, "CONT")
        local lock = assert(client:try_acquire(key, { ttl = 2000 }))
        local remaining = lock:remaining()
        assert.is_true(remaining <= 2000 - 350, "overstates validity: " .. remaining)
        assert.is_true(lock:release())
    end)

    it("a failed extend never deletes a still-valid lock", function()
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 5000 }))
        -- extend fails (not owner) once the key holds another token...
        data:command("SET", key, "intruder", "PX", 5000)
        local ok = lock:extend()
        assert.is_nil(ok)
        assert.equal("intruder", data:command("GET", key))
        -- ...and fails (server error) on a key of the wrong type, leaving it
        data:command("DEL", key)
        data:command("RPUSH", key, "x")
        ok = lock:extend()
        assert.is_nil(ok)
        assert.equal(1, data:command("EXISTS", key))
    end)

    it("a lock taken by another library (plain SET NX PX) is never released by us", function()
        local key = helper.key()
        data:command("SET", key, "theirs", "NX", "PX", 10000)
        local _, _, code = client:try_acquire(key)
        assert.equal("locked", code)
        assert.equal("theirs", data:command("GET", key))
    end)

    it("Redlock never leaves keys behind on the minority after a failed attempt", function()
        local others = { helper.start_server(), helper.start_server() }
        local urls = { server:url(), others[1]:url(), others[2]:url() }
        local key = helper.key()
        -- another holder has the key on 2 of 3: our attempt wins only the third
        data:command("SET", key, "theirs", "PX", 10000)
        assert.equal("OK", others[1]:cli("SET", key, "theirs", "PX", "10000"))
        -- (server_timeout: every server answers, however slow valgrind is)
        local c = redlock.new { servers = urls, server_timeout = 2000 }
        local lock, _, code = c:try_acquire(key)
        assert.is_nil(lock)
        assert.equal("locked", code)
        assert.equal("", others[2]:cli("GET", key))
        assert.equal("theirs", data:command("GET", key))
        assert.equal("theirs", others[1]:cli("GET", key))
        c:close()
        others[1]:stop()
        others[2]:stop()
    end)

    it("renewal never outlives release", function()
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = helper.ms(300), renew = true }))
        helper.sleep(helper.ms(400)) -- renewed at least once: still ours
        assert.equal(lock.token, data:command("GET", key))
        assert.is_true(lock:release())
        -- the token back in place by hand: a renewal still running would extend it
        data:command("SET", key, lock.token, "PX", helper.ms(300))
        helper.sleep(helper.ms(700))
        assert.equal(0, data:command("EXISTS", key))
    end)

    it("renewal never outlives close()", function()
        local c = redlock.new { servers = { server:url() } }
        local key = helper.key()
        local lock = assert(c:acquire(key, { ttl = helper.ms(300), renew = true }))
        c:close()
        data:command("SET", key, lock.token, "PX", helper.ms(300))
        helper.sleep(helper.ms(700))
        assert.equal(0, data:command("EXISTS", key))
    end)
end)
