-- Semaphores and group locks with replica acknowledgement (replicas = N)
-- and through Sentinel, against real servers (Lua 5.4 only, as the other
-- topology specs).
local helper = require "helper"
local core = require "redlock.core"
local redlock = require "redlock"

describe("semaphores and group locks with replicas = N", function()
    -- (the kinds\' scripts read the server\'s clock: Redis 3.2+)
    local it = helper.needing(it, "script_time")
    local master, replica, data
    setup(function()
        helper.lua54_only()
        master = helper.start_server()
        replica = helper.start_replica(master)
        data = core.conn(master:spec())
    end)
    teardown(function()
        if replica then replica:thaw() end
        if data then data:close() end
        helper.stop_all()
    end)

    it("takes a permit and a group once the replica has them, and says how many acknowledged", function()
        -- (5 s: the replica acknowledges within a round trip, or as soon as a loaded machine lets it)
        local client = redlock.new { servers = { master:url() }, replicas = 1, replica_timeout = 5000 }
        local key = helper.key("sem")
        local p = assert(client:acquire(key, { limit = 2 }))
        assert.equal(1, p.replicas)
        assert.equal(1, replica:cli("EXISTS", key) == "1" and 1 or 0)
        assert.is_true(p:extend())
        assert.is_true(p:release())
        local a, b = helper.key("a"), helper.key("b")
        local g = assert(client:acquire({ a, b }))
        assert.equal(1, g.replicas)
        assert.equal(g.token, replica:cli("GET", b))
        assert.is_true(g:extend())
        assert.is_true(g:release())
        -- 4 keys and more: the answer of the group's script is a table
        local keys = { helper.key("g1"), helper.key("g2"), helper.key("g3"), helper.key("g4"), helper.key("g5") }
        local g5 = assert(client:acquire(keys))
        assert.equal(1, g5.replicas)
        for _, k in ipairs(keys) do
            assert.is_number(g5.fences[k], "no fence for " .. k)
            assert.is_true(g5.fences[k] > 0)
        end
        assert.is_true(g5:release())
        local r = assert(client:acquire(key, { shared = true }))
        assert.equal(1, r.replicas)
        assert.equal("zset", replica:cli("TYPE", key))
        assert.is_true(r:release())
        client:close()
    end)

    it("fails closed: too few acknowledgements give the permit and the group back", function()
        local client = redlock.new { servers = { master:url() }, replicas = 2, replica_timeout = 100 }
        local key, a, b = helper.key("sem"), helper.key("a"), helper.key("b")
        local _, err, code = client:acquire(key, { limit = 2 })
        assert.equal("replicas", code, err)
        assert.matches("released", err)
        assert.equal(0, data:command("EXISTS", key))
        _, err, code = client:acquire({ a, b })
        assert.equal("replicas", code, err)
        assert.equal(0, data:command("EXISTS", a))
        assert.equal(0, data:command("EXISTS", b))
        _, err, code = client:acquire(key, { shared = true })
        assert.equal("replicas", code, err)
        assert.equal(0, data:command("EXISTS", key))
        client:close()
    end)

    it("renews a permit and a group waiting for the replica", function()
        local client = redlock.new { servers = { master:url() }, replicas = 1, replica_timeout = 500 }
        local ok, lost = client:with_lock(helper.key("sem"), { limit = 3, ttl = helper.ms(300) }, function(p)
            core.sleep(helper.ms(900))
            return p:lost()
        end)
        assert.is_true(ok)
        assert.is_false(lost)
        ok, lost = client:with_lock({ helper.key("a"), helper.key("b") }, { ttl = helper.ms(300) }, function(g)
            core.sleep(helper.ms(900))
            return g:lost()
        end)
        assert.is_true(ok)
        assert.is_false(lost)
        client:close()
    end)
end)

describe("semaphores and group locks through Sentinel", function()
    -- (the kinds\' scripts read the server\'s clock: Redis 3.2+)
    local it = helper.needing(it, "script_time")
    local master, sentinels
    setup(function()
        helper.lua54_only()
        master = helper.start_server()
        helper.start_replica(master)
        sentinels = { helper.start_sentinel({ mymaster = master }) }
    end)
    teardown(function() helper.stop_all() end)

    it("takes permits and groups on the master the sentinel names", function()
        local client = redlock.new { servers = { "redis+sentinel://127.0.0.1:" .. sentinels[1].port .. "/mymaster" },
            retry_delay = 5 }
        local key = helper.key("sem")
        local p1 = assert(client:acquire(key, { limit = 2 }))
        local p2 = assert(client:acquire(key, { limit = 2 }))
        local _, _, code = client:try_acquire(key, { limit = 2 })
        assert.equal("locked", code)
        assert.equal("3", master:cli("ZCARD", key))
        assert(p1:release() and p2:release())
        local a, b = helper.key("a"), helper.key("b")
        local g = assert(client:acquire({ b, a }))
        assert.equal(g.token, master:cli("GET", a))
        assert.is_true(g:release())
        local r1 = assert(client:acquire(key, { shared = true }))
        local r2 = assert(client:acquire(key, { shared = true }))
        assert.equal("zset", master:cli("TYPE", key))
        assert(r1:release() and r2:release())
        client:close()
    end)
end)
