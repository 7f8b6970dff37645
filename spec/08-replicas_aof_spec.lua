-- WAITAOF (aof = true, Redis 7.2+ and Valkey): the lock's write is in the
-- append-only file of the master and of N replicas before acquire or
-- extend succeeds. Real servers with appendonly yes; the server-matrix
-- suite (tools/test-servers.sh) runs this against ../shared/servers' 7.2+
-- builds, and servers without WAITAOF (Debian's 7.0.15) skip it, saying so.
local helper = require "helper"
local redlock = require "redlock"

local skip = helper.lua54_only()

-- Whatever the library could have left on a master for key (as spec/08).
local function leftovers(server, key)
    local out = {}
    for _, k in ipairs({ key, "{" .. key .. "}:waiters", "{" .. key .. "}:waiting", "{" .. key .. "}:wake" }) do
        if server:cli("EXISTS", k) ~= "0" then out[#out + 1] = k end
    end
    return table.concat(out, " ")
end

describe("WAITAOF (aof = true): a master and a replica, both with appendonly yes", function()
    -- each test skipped by name where WAITAOF is missing
    local why = skip or helper.lacks("waitaof")
    local test = it
    local it = why and function(name)
        test(name, function() pending("skipped: '" .. name .. "': " .. why) end)
    end or test
    local master, replica, client

    -- Whether the append-only files under server's dir hold `text` (the
    -- multi-part AOF of 7.0+: appendonlydir/).
    local function in_aof(server, text)
        local ok = os.execute("grep -rqF " .. helper.quote(text) .. " " .. helper.quote(server.dir .. "/appendonlydir"))
        return ok == true or ok == 0
    end

    setup(function()
        if why then return end
        master = helper.start_server { persistent = true }
        replica = helper.start_replica(master, { config = { "appendonly yes", "appendfsync always" } })
        client = redlock.new { servers = { master:url() }, aof = true, replicas = 1, replica_timeout = 2000,
            retry_delay = 10, retry_jitter = 5 }
    end)
    teardown(function()
        if replica then replica:thaw() end
        if client then client:close() end
        helper.stop_all()
    end)

    it("takes the lock once the master's and the replica's AOF have it", function()
        local key = helper.key("aof")
        local lock, err = client:acquire(key)
        assert.is_truthy(lock, err)
        assert.equal(1, lock.replicas)
        -- WAITAOF returned: both append-only files hold the token
        assert.is_true(in_aof(master, lock.token))
        assert.is_true(in_aof(replica, lock.token))
        assert.equal(lock.token, replica:cli("GET", key))
        assert.is_true(lock:extend(5000))
        assert.equal(1, lock.replicas)
        assert.is_true(lock:release())
        assert.equal("0", replica:cli("EXISTS", key))
    end)

    it("with replicas = 0 waits for the master's own fsync only", function()
        local key = helper.key("aof")
        local lock, err = client:acquire(key, { replicas = 0 })
        assert.is_truthy(lock, err)
        assert.equal(0, lock.replicas)
        assert.is_true(in_aof(master, lock.token))
        assert.is_true(lock:release())
    end)

    it("fails closed when the replica's AOF does not get it: code replicas, no key left", function()
        local key = helper.key("aof")
        replica:freeze()
        local lock, err, code = client:acquire(key, { replica_timeout = 300 })
        replica:thaw()
        assert.is_nil(lock)
        assert.equal("replicas", code)
        assert.truthy(err:find("reached the AOF of 0 of 1 replicas within 300 ms", 1, true), err)
        assert.truthy(err:find("the lock was released", 1, true), err)
        assert.equal("", leftovers(master, key))
        lock = assert(client:acquire(key))
        assert.is_true(lock:release())
    end)
end)
