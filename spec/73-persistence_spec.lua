-- Persistence (issue 38): what a lock survives when its server crashes
-- (SIGKILL) and comes back, with AOF (appendfsync always, everysec) and
-- without persistence, for one server and for Redlock; Sanfilippo's
-- delayed restart; fences that keep rising across a restart that lost the
-- counter. What the library guarantees is asserted, not how it does it.
local helper = require "helper"
local redlock = require "redlock"

local skip = helper.lua54_only()

local AOF = {
    always = { "appendonly yes", "appendfsync always" },
    everysec = { "appendonly yes", "appendfsync everysec" },
    none = nil,
}

-- A crash: SIGKILL, then the same server started again on its port.
local function crash_restart(server)
    server:kill()
    server.fixed_port = true
    server:start()
end

local function servers(n, config)
    local list, urls = {}, {}
    for i = 1, n do
        list[i] = helper.start_server { config = config }
        urls[i] = list[i]:url()
    end
    return list, urls
end

describe("persistence", function()
    if skip then
        pending("skipped: " .. skip)
        return
    end
    teardown(function() helper.stop_all() end)

    for _, fsync in ipairs({ "always", "everysec" }) do
        it("one server with AOF (appendfsync " .. fsync .. "): the lock survives a crash, with its ttl",
            function()
                local list, urls = servers(1, AOF[fsync])
                local a = redlock.new { servers = urls }
                local b = redlock.new { servers = urls }
                local key = helper.key("aof")
                local lock = assert(a:acquire(key, { ttl = 30000 }))
                -- (everysec: a process crash loses nothing, the write was in
                -- the kernel before the reply; a power loss may lose the
                -- last second, which no spec here can make)
                crash_restart(list[1])
                assert.equal(lock.token, list[1]:cli("GET", key))
                local pttl = tonumber(list[1]:cli("PTTL", key))
                assert.is_true(pttl > 0 and pttl <= 30000, "pttl " .. pttl)
                local _, _, code = b:try_acquire(key)
                assert.equal("locked", code)
                assert.is_true(lock:release())
                local again = assert(b:try_acquire(key))
                assert.is_true(again.fence > lock.fence)
                assert.is_true(again:release())
                a:close()
                b:close()
                list[1]:stop()
            end)
    end

    it("one server without persistence: a crash loses the lock (a second holder at once), fences still rise",
        function()
            local list, urls = servers(1, AOF.none)
            local a = redlock.new { servers = urls }
            local b = redlock.new { servers = urls }
            local key = helper.key("volatile")
            local lock = assert(a:acquire(key, { ttl = 30000 }))
            crash_restart(list[1])
            assert.equal("0", list[1]:cli("EXISTS", key))
            local second = assert(b:try_acquire(key))
            -- two holders: the documented limit of a server that loses data
            assert.is_true(lock:remaining() > 0)
            assert.is_true(second.fence > lock.fence, "fence " .. second.fence .. " after " .. lock.fence)
            local _, _, code = lock:release()
            assert.equal("not owner", code)
            assert.is_true(second:release())
            -- and again, counter lost twice over
            crash_restart(list[1])
            local third = assert(a:try_acquire(key))
            assert.is_true(third.fence > second.fence)
            assert.is_true(third:release())
            a:close()
            b:close()
            list[1]:stop()
        end)

    it("Redlock without persistence: one of three crashed keeps the lock, two of three lose it", function()
        local list, urls = servers(3, AOF.none)
        local a = redlock.new { servers = urls }
        local b = redlock.new { servers = urls, retry_delay = 10 }
        local key = helper.key("redlock")
        local lock = assert(a:acquire(key, { ttl = 30000 }))
        crash_restart(list[1])
        local _, _, code = b:try_acquire(key)
        assert.equal("locked", code)
        crash_restart(list[2])
        -- a majority forgot it: a second holder while the first is valid
        local second = assert(b:try_acquire(key))
        assert.is_true(lock:remaining() > 0)
        assert.is_true(second.fence > lock.fence)
        assert.is_true(second:release())
        a:close()
        b:close()
        for _, s in ipairs(list) do s:stop() end
    end)

    it("Redlock without persistence, restarts delayed by the ttl (Sanfilippo's advice): never two holders",
        function()
            local list, urls = servers(3, AOF.none)
            local a = redlock.new { servers = urls }
            local b = redlock.new { servers = urls, retry_delay = 10 }
            local key = helper.key("delayed")
            local ttl = 1500
            local lock = assert(a:acquire(key, { ttl = ttl }))
            list[1]:kill()
            list[2]:kill()
            -- down for at least the longest ttl in use: every lock they
            -- granted has expired by the time they are back
            helper.sleep(ttl)
            for i = 1, 2 do
                list[i].fixed_port = true
                list[i]:start()
            end
            assert.equal(0, lock:remaining())
            local second = assert(b:acquire(key, { wait = 2000 }))
            assert.is_true(second.fence > lock.fence)
            assert.is_true(second:release())
            a:close()
            b:close()
            for _, s in ipairs(list) do s:stop() end
        end)

    it("Redlock with AOF (appendfsync always): two of three crashed keep the lock", function()
        local list, urls = servers(3, AOF.always)
        local a = redlock.new { servers = urls }
        local b = redlock.new { servers = urls }
        local key = helper.key("redlock-aof")
        local lock = assert(a:acquire(key, { ttl = 30000 }))
        crash_restart(list[1])
        crash_restart(list[2])
        local _, _, code = b:try_acquire(key)
        assert.equal("locked", code)
        assert.is_true(lock:release())
        local again = assert(b:try_acquire(key))
        assert.is_true(again.fence > lock.fence)
        assert.is_true(again:release())
        a:close()
        b:close()
        for _, s in ipairs(list) do s:stop() end
    end)

    it("Redlock: fences keep rising when every server lost its counter", function()
        local list, urls = servers(3, AOF.none)
        local a = redlock.new { servers = urls }
        local key = helper.key("fences")
        local last = 0
        for _ = 1, 3 do
            local lock = assert(a:acquire(key))
            assert.is_true(lock.fence > last, "fence " .. lock.fence .. " after " .. last)
            last = lock.fence
            assert.is_true(lock:release())
            for _, s in ipairs(list) do crash_restart(s) end
        end
        a:close()
        for _, s in ipairs(list) do s:stop() end
    end)
end)
