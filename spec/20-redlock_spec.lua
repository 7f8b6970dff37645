-- Redlock: one lock across 5 independent redis-servers (issue 4).
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"
local quorum = require "redlock.quorum"

local N = 5

describe("Redlock over 5 servers", function()
    local servers, urls, data = {}, {}, {}
    local clients = {}

    -- A client over all 5. The per-server timeout is generous unless a test
    -- is about it: a busy test host must not turn a stall into a failure.
    local function new_client(extra)
        local opts = { servers = urls, retry_delay = 10, retry_jitter = 10, server_timeout = 500 }
        for k, v in pairs(extra or {}) do opts[k] = v end
        local c = redlock.new(opts)
        clients[#clients + 1] = c
        return c
    end

    -- What each server holds under key, in server order (false: nothing).
    local function held(key)
        local out = {}
        for i = 1, N do
            local v = data[i]:command("GET", key)
            out[i] = v ~= core.null and v
        end
        return out
    end

    local function count(t, want)
        local n = 0
        for i = 1, N do if t[i] == want then n = n + 1 end end
        return n
    end

    -- Brings back every server a test killed or froze.
    local function heal() helper.heal(servers, data) end

    setup(function()
        for i = 1, N do
            servers[i] = helper.start_server()
            urls[i] = servers[i]:url()
            data[i] = core.conn(servers[i]:spec())
        end
    end)
    after_each(function()
        for _, c in ipairs(clients) do c:close() end
        clients = {}
    end)
    teardown(function()
        for i = 1, N do data[i]:close() end
        helper.stop_all()
    end)

    it("is the strategy of a client with 2 or more servers; quorum is floor(N/2)+1", function()
        assert.equal("quorum", new_client().strategy.name)
        assert.equal("single", redlock.new { servers = { urls[1] } }.strategy.name)
        assert.same({ 2, 2, 3, 3, 4 }, { quorum.quorum(2), quorum.quorum(3), quorum.quorum(4),
            quorum.quorum(5), quorum.quorum(7) })
    end)

    it("derives the per-server timeout from the ttl, capped small, unless given", function()
        local c = redlock.new { servers = urls }
        assert.equal(50, quorum.server_timeout(c, 10000))
        assert.equal(50, quorum.server_timeout(c, 600000))
        assert.equal(10, quorum.server_timeout(c, 1000))
        assert.equal(25, quorum.server_timeout(c, 5000))
        assert.equal(500, quorum.server_timeout(new_client(), 10000))
        c:close()
    end)

    it("checks its options", function()
        assert.has_error(function() redlock.new { servers = urls, server_timeout = 0 } end,
            "bad option 'server_timeout' to 'new' (integer from 1 to 86400000 (ms) expected, got 0)")
        assert.has_error(function() redlock.new { servers = urls, server_backoff = -1 } end)
        local many = {}
        for i = 1, 65 do many[i] = urls[1] end
        assert.has_error(function() redlock.new { servers = many } end,
            "bad option 'servers' to 'new' (at most 64 servers)")
    end)

    it("acquire holds the key on every server; another client is refused with 'locked'", function()
        local key = helper.key()
        local a, b = new_client(), new_client()
        local lock = assert(a:acquire(key, { ttl = 5000 }))
        local h = held(key)
        assert.equal(N, count(h, lock.token))
        for i = 1, N do
            local pttl = data[i]:command("PTTL", key)
            assert.is_true(pttl > 4000 and pttl <= 5000, "pttl " .. pttl)
        end
        local other, err, code = b:try_acquire(key)
        assert.is_nil(other)
        assert.equal("locked", code)
        assert.matches("^locked: '.-' is held by another owner on 5 of 5 servers %(127", err)
        local _, _, code2 = b:acquire(key, { wait = 100 })
        assert.equal("timeout", code2)
        assert.is_true(lock:release())
        assert.equal(0, count(held(key), lock.token))
        assert.truthy(assert(b:try_acquire(key)):release())
    end)

    -- a counter far ahead of the servers' clocks (2^52; fences count ms
    -- since 2026 times 100: near 2^41 today)
    local AHEAD = 2 ^ 52

    it("lock.fence is the largest of the fences of the servers that granted", function()
        local key = helper.key()
        local c = new_client()
        helper.set_fence(data[2], AHEAD)
        local lock = assert(c:acquire(key))
        assert.equal(AHEAD + 1, lock.fence)
        lock:release()
        lock = assert(c:acquire(key))
        assert.equal(AHEAD + 2, lock.fence)
        lock:release()
        for i = 1, N do data[i]:command("DEL", "redlock:fences") end
    end)

    it("fences strictly increase across holders granted by different majorities", function()
        local key = helper.key()
        finally(function() for i = 1, N do data[i]:command("DEL", "redlock:fences", key) end end)
        -- servers 1-2 ahead; the first holder gets servers 1-3 (4-5 held by
        -- someone else), the second only 3-5 (1-2 held): server 3, in both
        -- majorities, must have learnt the first fence
        for i = 1, 2 do helper.set_fence(data[i], AHEAD) end
        for i = 4, 5 do data[i]:command("SET", key, "someone-else", "PX", 5000) end
        local first = assert(new_client():acquire(key))
        assert.equal(AHEAD + 1, first.fence)
        assert.is_true(first:release())
        for i = 4, 5 do data[i]:command("DEL", key) end
        -- a failed attempt against a majority holder (servers 1-3) first
        for i = 1, 3 do data[i]:command("SET", key, "someone-else", "PX", 5000) end
        local none, _, code = new_client():try_acquire(key)
        assert.is_nil(none)
        assert.equal("locked", code)
        data[3]:command("DEL", key)
        local second = assert(new_client():acquire(key))
        assert.is_true(second.fence > first.fence, second.fence .. " after " .. first.fence)
        assert.is_true(second:release())
    end)

    it("sync_fence = false is refused: Redlock fences are always synced", function()
        assert.has_error(function() new_client { sync_fence = false } end)
        assert.truthy(new_client { sync_fence = true })
    end)

    it("refuses the same server twice (it would vote twice)", function()
        assert.has_error(function()
            redlock.new { servers = { urls[1], urls[2], urls[1] .. "/3" } }
        end, "bad option 'servers' to 'new' (server #3 is server #1 again: 127.0.0.1:"
            .. servers[1].port .. "; Redlock needs independent servers)")
    end)

    it("with 2 servers killed acquire succeeds; with 3 killed try_acquire says 'no quorum' within 2 s",
        function()
            local key = helper.key()
            finally(heal)
            servers[1]:kill()
            servers[2]:kill()
            local c = new_client()
            local lock = assert(c:acquire(key))
            for i = 3, N do assert.equal(lock.token, data[i]:command("GET", key)) end
            assert.is_true(lock:release())
            servers[3]:kill()
            local t0 = core.now()
            local other, err, code = new_client():try_acquire(key)
            assert.is_true(core.now() - t0 < 2000, "took " .. (core.now() - t0))
            assert.is_nil(other)
            assert.equal("no quorum", code)
            assert.matches("^no quorum: granted by 2 of 5 servers, 3 needed %(", err)
            assert.matches(servers[1].port .. ": error: could not connect", err, 1, true)
            assert.matches(servers[4].port .. ": granted", err, 1, true)
            assert.matches("%(acquiring '.-'%)$", err)
            -- and the failed attempt took back what it got
            assert.equal(core.null, data[4]:command("GET", key))
            assert.equal(core.null, data[5]:command("GET", key))
            -- acquire tries again within its wait, then says no quorum, naming
            -- each server and what it said (spec/26: tried again)
            local _, err2, code2 = c:acquire(key, { wait = 300 })
            assert.equal("no quorum", code2)
            assert.matches(servers[3].port .. ": [^;]*could not connect", err2)
            assert.matches("%(acquiring '.-', waited 300 ms, %d+ attempts%)$", err2)
        end)

    it("background renewal asks every server at once: a frozen one does not hold the others up", function()
        local key = helper.key()
        finally(heal)
        -- (every time scaled alike by helper.ms: the figures below are 1x)
        local c = new_client { server_timeout = helper.ms(2500), timeout = helper.ms(3000) }
        local lock = assert(c:acquire(key, { ttl = helper.ms(3000), renew = true }))
        -- the first round (at ~1 s, all servers up) opens the renewal's connections
        helper.sleep(helper.ms(1300))
        servers[1]:freeze()
        -- the second round (at ~2 s) waits 2.5 s for server 1: one server after
        -- another, servers 2-5 would be extended only then, after their keys
        -- (extended to ~4 s) expired
        helper.sleep(helper.ms(3000))
        for i = 2, N do assert.equal(lock.token, data[i]:command("GET", key)) end
        servers[1]:thaw()
        assert.is_true(lock:release())
        c:close()
    end)

    it("a release reaches a server in back-off too: no copy outlives the release once it is back", function()
        local key = helper.key()
        finally(heal)
        local c = new_client { server_timeout = 200, server_backoff = 60000 }
        local lock = assert(c:acquire(key, { ttl = 30000 }))
        for i = 1, N do assert.equal(lock.token, data[i]:command("GET", key)) end
        servers[1]:freeze()
        assert(c:try_acquire(helper.key())):release() -- server 1 times out: back-off
        assert.is_true(c.servers[1].down_until > core.now())
        servers[1]:thaw()
        assert.is_true(lock:release())
        assert.equal(core.null, data[1]:command("GET", key))
    end)

    it("servers in back-off are asked when the others cannot make a majority without them", function()
        local key, key2 = helper.key(), helper.key()
        finally(heal)
        local c = new_client { server_timeout = 200, server_backoff = 60000 }
        assert(c:try_acquire(helper.key())):release() -- connections open before the freeze
        for i = 1, 3 do servers[i]:freeze() end
        local _, _, code = c:try_acquire(key) -- servers 1-3 time out: back-off
        assert.equal("no quorum", code)
        for i = 1, 3 do servers[i]:thaw() end
        for i = 1, 3 do assert.is_true(c.servers[i].down_until > core.now()) end
        -- (2 of 5 left: 1-3 are asked, and grant it)
        local lock = assert(c:try_acquire(key2))
        assert.equal(N, count(held(key2), lock.token))
        -- an extend, too
        for i = 1, 3 do c.servers[i].down_until = core.now() + 60000 end
        assert.is_true(lock:extend())
        assert.is_true(lock:release())
    end)

    it("a frozen server (SIGSTOP) costs one short timeout; the lock holds on the other 4",
        function()
            local key = helper.key()
            finally(heal)
            local c = new_client { server_timeout = 200, server_backoff = 1500 }
            assert(c:try_acquire(helper.key())):release() -- connections open before the freeze
            servers[1]:freeze()
            local t0 = core.now()
            local lock = assert(c:try_acquire(key))
            local took = core.now() - t0
            assert.is_true(took < 1000, "took " .. took)
            for i = 2, N do assert.equal(lock.token, data[i]:command("GET", key)) end
            local _, err, code = new_client({ server_timeout = 100 }):try_acquire(key)
            assert.equal("locked", code)
            assert.matches("held by another owner on 4 of 5 servers", err)
            -- a release asks the frozen server too (within server_timeout),
            -- and succeeds on the other 4
            assert.is_true(lock:release())
            for i = 2, N do assert.equal(core.null, data[i]:command("GET", key)) end
            servers[1]:thaw()
            -- its late reply must not be taken for the answer to a later request
            helper.sleep(1600) -- past the back-off
            local key2 = helper.key()
            local lock2 = assert(c:try_acquire(key2))
            assert.equal(N, count(held(key2), lock2.token))
            assert.is_true(lock2:release())
        end)

    it("fails with 'locked' when another holder owns 3 of 5, leaving none of its keys on the other 2",
        function()
            local key = helper.key()
            for i = 1, 3 do data[i]:command("SET", key, "someone-else", "PX", 5000) end
            local _, err, code = new_client():try_acquire(key)
            assert.equal("locked", code)
            assert.matches("held by another owner on 3 of 5 servers", err)
            assert.matches("expires in %d+ ms", err)
            assert.equal(core.null, data[4]:command("GET", key))
            assert.equal(core.null, data[5]:command("GET", key))
            for i = 1, 3 do assert.equal("someone-else", data[i]:command("GET", key)) end
        end)

    it("split votes give 'no quorum' with per-server detail, and 'timeout' after waiting", function()
        local key = helper.key()
        finally(heal)
        servers[5]:kill()
        for i = 1, 2 do data[i]:command("SET", key, "someone-else", "PX", 5000) end
        local c = new_client()
        local _, err, code = c:try_acquire(key)
        assert.equal("no quorum", code)
        assert.matches("^no quorum: granted by 2 of 5 servers, 3 needed", err)
        assert.matches(servers[1].port .. ": held by another owner (expires in", err, 1, true)
        assert.matches(servers[3].port .. ": granted", err, 1, true)
        assert.matches(servers[5].port .. ": error: could not connect", err, 1, true)
        assert.equal(core.null, data[3]:command("GET", key))
        assert.equal(core.null, data[4]:command("GET", key))
        _, err, code = c:acquire(key, { wait = 200 })
        assert.equal("timeout", code)
        assert.matches("^timeout: waited 200 ms for '.-', held by another owner on 2 of 5 servers", err)
    end)

    it("gets the lock once another holder's keys expire on enough servers", function()
        local key = helper.key()
        for i = 1, 3 do data[i]:command("SET", key, "someone-else", "PX", 300) end
        local t0 = core.now()
        local lock = assert(new_client():acquire(key, { wait = 5000, retry_delay = 5000 }))
        local took = core.now() - t0
        assert.is_true(took >= 250 and took < 2000, "took " .. took)
        lock:release()
    end)

    it("validity shrinks by the elapsed time and the drift allowance", function()
        local c = new_client()
        local lock = assert(c:acquire(helper.key(), { ttl = 5000 }))
        local r = lock:remaining()
        assert.is_true(r <= 5000 - 5000 * 0.01 - 2, "overstates: " .. r)
        assert.is_true(r > 4000)
        helper.sleep(300)
        assert.is_true(lock:remaining() <= r - 250)
        lock:release()
    end)

    it("refuses an attempt slower than the ttl, and takes back its keys", function()
        local key = helper.key()
        finally(heal)
        -- a ttl within the drift allowance can never be valid
        local _, _, code0 = new_client():try_acquire(helper.key(), { ttl = 2 })
        assert.equal("no quorum", code0)
        local c = new_client { server_timeout = 400 }
        assert(c:try_acquire(helper.key())):release()
        servers[1]:freeze()
        local _, err, code = c:try_acquire(key, { ttl = 150 })
        assert.equal("no quorum", code)
        assert.matches("^no quorum: the attempt took %d+ ms, more than the validity of a 150 ms ttl", err)
        for i = 2, N do assert.equal(core.null, data[i]:command("GET", key)) end
    end)

    it("extend succeeds on a majority; not owner when a majority lost it, which clears the rest", function()
        local key = helper.key()
        local c = new_client()
        local lock = assert(c:acquire(key, { ttl = 1000 }))
        assert.is_true(lock:extend(20000))
        for i = 1, N do assert.is_true(data[i]:command("PTTL", key) > 19000) end
        assert.is_true(lock:remaining() > 19000)
        data[1]:command("DEL", key)
        data[2]:command("DEL", key)
        assert.is_true(lock:extend(20000)) -- 3 of 5 still hold it
        data[3]:command("DEL", key)
        local ok, err, code = lock:extend(20000)
        assert.is_nil(ok)
        assert.equal("not owner", code)
        assert.matches("^not owner: '.-' is no longer held by this lock on 3 of 5 servers", err)
        assert.equal(0, lock:remaining())
        assert.equal(core.null, data[4]:command("GET", key))
        assert.equal(core.null, data[5]:command("GET", key))
    end)

    it("release goes to every server; 'not owner' when a majority lost it; 'no quorum' when unsure",
        function()
            local key = helper.key()
            local c = new_client()
            local lock = assert(c:acquire(key))
            data[1]:command("DEL", key)
            assert.is_true(lock:release())
            assert.equal(0, count(held(key), lock.token))

            lock = assert(c:acquire(key))
            for i = 1, 3 do data[i]:command("DEL", key) end
            local ok, _, code = lock:release()
            assert.is_nil(ok)
            assert.equal("not owner", code)
            assert.equal(0, count(held(key), lock.token))

            finally(heal)
            lock = assert(c:acquire(key))
            data[1]:command("DEL", key)
            data[2]:command("DEL", key)
            servers[5]:kill()
            local err
            ok, err, code = lock:release()
            assert.is_nil(ok)
            assert.equal("no quorum", code)
            assert.matches("^no quorum: released on 2 of 5 servers, 3 needed", err)
            assert.matches("%(releasing '.-'%)$", err)
        end)

    it("survives a restarted server (stale connection) without a failure", function()
        local key = helper.key()
        local c = new_client { server_backoff = 0 }
        assert(c:acquire(key)):release()
        servers[2]:restart()
        data[2]:close()
        data[2] = core.conn(servers[2]:spec())
        local lock = assert(c:acquire(key))
        assert.equal(N, count(held(key), lock.token))
        assert.is_true(lock:release())
    end)

    it("recovers from SCRIPT FLUSH on every server (NOSCRIPT, then EVAL)", function()
        local key = helper.key()
        local c = new_client()
        assert(c:acquire(key)):release()
        for i = 1, N do data[i]:command("SCRIPT", "FLUSH") end
        local lock = assert(c:acquire(key))
        for i = 1, N do data[i]:command("SCRIPT", "FLUSH") end
        assert.is_true(lock:extend())
        for i = 1, N do data[i]:command("SCRIPT", "FLUSH") end
        assert.is_true(lock:release())
    end)

    it("a retry never counts our own leftover keys against us", function()
        local key = helper.key()
        local c = new_client()
        local lock = assert(c:acquire(key))
        -- the same token again, as a retry after a lost reply would send it
        local ok, fence = quorum.acquire(c, key, lock.token, 10000)
        assert.is_true(ok)
        assert.is_true(fence > lock.fence) -- a new fence: the lost reply's was never seen
        assert.is_true(lock:release())
    end)

    it("with_lock works over the quorum", function()
        local key = helper.key()
        local ok, v = new_client():with_lock(key, function(lock)
            return count(held(key), lock.token)
        end)
        assert.is_true(ok)
        assert.equal(N, v)
        assert.equal(N, count(held(key), false))
    end)

    it("several processes contending over 5 servers lose no update", function()
        local key = helper.key("contend")
        local workers, per = 4, 20
        local list = table.concat(urls, ",")
        local ws = {}
        for w = 1, workers do
            ws[w] = helper.spawn("spec/20-redlock_worker.lua", key, per, list, urls[1])
        end
        for w = 1, workers do
            local status, out = ws[w]:wait(120000)
            assert.equal(0, status, out)
            assert.matches("done", out)
        end
        assert.equal(tostring(workers * per), data[1]:command("GET", key .. ":counter"))
    end)
end)
