-- Readers and writers (opts.shared = true for a reader; a writer is a plain
-- acquire), between real processes: readers overlap, a writer never
-- overlaps anyone, a stream of readers does not starve a waiting writer,
-- readers waiting behind a writer are let in together, the key exists
-- while only readers hold it.
local helper = require "helper"
local core = require "redlock.core"

describe("readers and writers (shared = true)", function()
    -- (the kinds\' scripts read the server\'s clock: Redis 3.2+)
    local it = helper.needing(it, "script_time")
    local server, client, data
    setup(function() server, client, data = helper.single_server() end)
    teardown(function() helper.close_all(client, data) end)

    it("4 reader and 2 writer processes: readers overlap, a writer never overlaps anyone", function()
        local key = helper.key("rw")
        local workers = {}
        for i = 1, 4 do workers[i] = helper.spawn("spec/workers/rw.lua", server:url(), key, "r", 40, 5) end
        for i = 5, 6 do workers[i] = helper.spawn("spec/workers/rw.lua", server:url(), key, "w", 15, 3) end
        local most = 0
        for i = 1, 6 do
            local status, out = workers[i]:wait(120000)
            assert.equal(0, status, out)
            most = math.max(most, tonumber(out:match("most (%d+)")))
        end
        assert.is_true(most > 1, "readers never overlapped")
        assert.equal(0, data:command("EXISTS", key))
    end)

    it("a stream of readers does not starve a waiting writer", function()
        local key, stop = helper.key("rw"), helper.key("stop")
        local readers = {}
        for i = 1, 3 do
            readers[i] = helper.spawn("spec/workers/rw.lua", server:url(), key, "r", 0, 40, stop)
        end
        -- the readers hold the key without a gap
        assert(helper.eventually(10000, function() return data:command("EXISTS", key) == 1 end))
        helper.sleep(300)
        local w, err = client:acquire(key, { wait = 20000 })
        assert.truthy(w, err)
        assert.equal(w.token, data:command("GET", key))
        assert(w:release())
        data:command("SET", stop, "1")
        for i = 1, 3 do
            local status, out = readers[i]:wait(30000)
            assert.equal(0, status, out)
        end
        data:command("DEL", stop)
    end)

    it("the key exists while only readers hold it: redis-cli SET key x NX fails", function()
        local key = helper.key("rw")
        local r1 = assert(client:acquire(key, { shared = true }))
        local r2 = assert(client:acquire(key, { shared = true }))
        assert.equal("", server:cli("SET", key, "x", "NX"))
        local _, _, code = client:try_acquire(key)
        assert.equal("locked", code)
        assert(r1:release())
        assert.equal("", server:cli("SET", key, "x", "NX"))
        assert(r2:release())
        assert.equal(0, data:command("EXISTS", key))
        assert.equal("OK", server:cli("SET", key, "x", "NX"))
        -- a key another client holds: readers wait like writers
        _, _, code = client:try_acquire(key, { shared = true })
        assert.equal("locked", code)
        data:command("DEL", key)
    end)

    it("readers waiting behind a writer are let in together when it releases", function()
        local key = helper.key("rw")
        local writer = assert(client:acquire(key, { ttl = 60000 }))
        local waiters_key = "{" .. key .. "}:waiters"
        local ws = {}
        for i = 1, 3 do
            ws[i] = helper.spawn("spec/workers/hold_permit.lua", server:url(), key, "r", 60000, 20000)
            assert(helper.eventually(10000, function() return data:command("ZCARD", waiters_key) == i end))
        end
        -- a writer queued behind them: readers after it stay out
        local late_writer = helper.spawn("spec/workers/hold_permit.lua", server:url(), key, 0, 60000, 20000)
        assert(helper.eventually(10000, function() return data:command("ZCARD", waiters_key) == 4 end))
        local _, _, code = client:acquire(key, { shared = true, wait = 300 })
        assert.equal("timeout", code)
        assert.is_true(writer:release())
        local fences = {}
        for i = 1, 3 do
            local status, out = ws[i]:wait(20000)
            assert.equal(0, status, out)
            fences[i] = tonumber(out:match("^held %x+ (%d+)"))
            assert.truthy(fences[i], out)
            assert.is_true(fences[i] > writer.fence)
        end
        -- the three hold the key together (their processes exited holding),
        -- and the writer queued behind them still waits
        assert.equal(4, data:command("ZCARD", key))
        assert.equal("zset", server:cli("TYPE", key))
        assert.is_nil(io.open(late_writer.dir .. "/status"))
        -- the readers gone (by hand: their processes exited), the writer
        -- gets the key at its next attempt
        data:command("DEL", key)
        local status, out = late_writer:wait(20000)
        assert.equal(0, status, out)
        assert.matches("^held", out)
        data:command("DEL", key)
    end)

    it("the last reader's release hands the key to a waiting writer in the same step", function()
        local key = helper.key("rw")
        local r1 = assert(client:acquire(key, { shared = true, ttl = 60000 }))
        local r2 = assert(client:acquire(key, { shared = true, ttl = 60000 }))
        local w = helper.spawn("spec/workers/hold_permit.lua", server:url(), key, 0, 60000, 20000)
        assert(helper.eventually(10000, function()
            return data:command("ZCARD", "{" .. key .. "}:waiters") == 1
        end))
        -- a writer waits: a new reader stays out although only readers hold
        local _, _, code = client:try_acquire(key, { shared = true })
        assert.equal("locked", code)
        _, _, code = client:acquire(key, { shared = true, wait = 200 })
        assert.equal("timeout", code)
        assert(r1:release())
        assert.equal("zset", server:cli("TYPE", key))
        assert(r2:release())
        -- no gap: the key went straight to the writer
        local token = data:command("GET", key)
        assert.equal(32, #token)
        local status, out = w:wait(20000)
        assert.equal(0, status, out)
        assert.equal(token, out:match("^held (%x+)"))
        data:command("DEL", key)
    end)

    it("readers renew in the background, and report a loss", function()
        local key = helper.key("rw")
        local ok, lost = client:with_lock(key, { shared = true, ttl = helper.ms(300) }, function(r)
            core.sleep(helper.ms(1000))
            return r:lost()
        end)
        assert.is_true(ok)
        assert.is_false(lost)
        local r = assert(client:acquire(key, { shared = true, ttl = helper.ms(300), renew = true }))
        data:command("DEL", key)
        assert(helper.eventually(5000, function() return r:lost() end))
        local _, _, code = r:release()
        assert.equal("not owner", code)
    end)

    it("fences strictly increasing across readers, writers and the other kinds", function()
        local key = helper.key("rw")
        local seen = {}
        local r1 = assert(client:acquire(key, { shared = true })); seen[#seen + 1] = r1.fence
        local r2 = assert(client:acquire(key, { shared = true })); seen[#seen + 1] = r2.fence
        assert(r1:release() and r2:release())
        local w = assert(client:acquire(key)); seen[#seen + 1] = w.fence; assert(w:release())
        local p = assert(client:acquire(key, { limit = 2 })); seen[#seen + 1] = p.fence; assert(p:release())
        local g = assert(client:acquire({ key, helper.key("j") })); seen[#seen + 1] = g.fences[key]
        assert(g:release())
        r1 = assert(client:acquire(key, { shared = true })); seen[#seen + 1] = r1.fence; assert(r1:release())
        for i = 2, #seen do assert.is_true(seen[i] > seen[i - 1], "fence " .. i) end
    end)

    it("refuses misuse: a semaphore of a readers' key, readers of a semaphore, shared with limit", function()
        local key = helper.key("rw")
        local r = assert(client:acquire(key, { shared = true }))
        local _, err, code = client:try_acquire(key, { limit = 2 })
        assert.equal("misuse", code, err)
        assert(r:release())
        local p = assert(client:acquire(key, { limit = 2 }))
        _, err, code = client:try_acquire(key, { shared = true })
        assert.equal("misuse", code, err)
        assert(p:release())
        assert.has_error(function() client:acquire(key, { shared = true, limit = 2 }) end)
        assert.has_error(function() client:acquire({ key, "b" }, { shared = true }) end)
        assert.has_error(function() client:acquire(key, { shared = 1 }) end)
    end)

    it("readers that expire unreleased leave nothing behind", function()
        local before = data:command("DBSIZE")
        local key = helper.key("rw")
        for _ = 1, 3 do assert(client:acquire(key, { shared = true, ttl = 150 })) end
        local _, _, code = client:acquire(key, { ttl = 150, wait = 50 })
        assert.equal("timeout", code)
        assert(helper.eventually(5000, function() return data:command("DBSIZE") <= before end))
        assert.equal(before, data:command("DBSIZE"))
    end)
end)

describe("readers and writers over Redlock (3 servers)", function()
    -- (the kinds\' scripts read the server\'s clock: Redis 3.2+)
    local it = helper.needing(it, "script_time")
    local servers, urls, client
    setup(function()
        servers, urls = {}, {}
        for i = 1, 3 do
            servers[i] = helper.start_server()
            urls[i] = servers[i]:url()
        end
        client = require("redlock").new { servers = urls, retry_delay = 5, retry_jitter = 5, server_timeout = 500 }
    end)
    teardown(function()
        client:close()
        helper.stop_all()
    end)

    it("readers hold a majority together; a writer and a reader exclude each other", function()
        local key = helper.key("rw")
        local r1 = assert(client:acquire(key, { shared = true }))
        local r2 = assert(client:acquire(key, { shared = true }))
        assert.is_true(r1.shared and r2.fence > r1.fence)
        for i = 1, 3 do assert.equal("zset", servers[i]:cli("TYPE", key)) end
        local _, _, code = client:try_acquire(key)
        assert.equal("locked", code)
        assert.is_true(r1:extend())
        assert(r1:release() and r2:release())
        for i = 1, 3 do assert.equal("0", servers[i]:cli("EXISTS", key)) end
        local w = assert(client:acquire(key))
        _, _, code = client:try_acquire(key, { shared = true })
        assert.equal("locked", code)
        assert(w:release())
    end)

    it("2 reader and 1 writer processes: readers overlap, the writer never overlaps anyone", function()
        local key = helper.key("rw")
        local all = table.concat(urls, ",")
        local workers = {}
        -- (each reader's run, 25 holds of 30 ms, outlasts the other's start
        -- on a busy machine: they overlap)
        for i = 1, 2 do workers[i] = helper.spawn("spec/workers/rw.lua", all, key, "r", 25, 30) end
        workers[3] = helper.spawn("spec/workers/rw.lua", all, key, "w", 10, 3)
        local most = 0
        for i = 1, 3 do
            local status, out = workers[i]:wait(120000)
            assert.equal(0, status, out)
            most = math.max(most, tonumber(out:match("most (%d+)")))
        end
        assert.is_true(most > 1, "readers never overlapped")
    end)

    it("one server down: readers and writers still get a majority", function()
        local key = helper.key("rw")
        servers[3]:stop()
        local r = assert(client:acquire(key, { shared = true }))
        local _, _, code = client:try_acquire(key)
        assert.equal("locked", code)
        assert(r:release())
        local w = assert(client:acquire(key))
        assert(w:release())
    end)

    it("still refuses a semaphore over Redlock, with the reason", function()
        local ok, err = pcall(client.acquire, client, "k", { limit = 2 })
        assert.is_false(ok)
        assert.matches("two majorities may overlap", err, 1, true)
    end)
end)
