-- Single-instance locks against a real redis-server.
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"

describe("single-instance locks", function()
    local server, client, data

    setup(function() server, client, data = helper.single_server() end)
    teardown(function() helper.close_all(client, data) end)

    it("acquires and releases; the key holds the token with a PX ttl", function()
        helper.needs("set_px")
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 5000 }))
        assert.equal(key, lock.key)
        assert.matches("^%x+$", lock.token)
        assert.equal(32, #lock.token)
        assert.equal(lock.token, data:command("GET", key))
        local pttl = data:command("PTTL", key)
        assert.is_true(pttl > 4000 and pttl <= 5000)
        assert.is_true(lock:release())
        assert.equal(0, data:command("EXISTS", key))
    end)

    it("try_acquire on a held key gives 'locked' at once", function()
        local key = helper.key()
        local lock = assert(client:acquire(key))
        local t0 = core.now()
        local other, err, code = client:try_acquire(key)
        assert.is_nil(other)
        assert.equal("locked", code)
        assert.matches("^locked: '" .. key:gsub("%p", "%%%0") .. "' is held by another owner on 127%.0%.0%.1:%d+", err)
        assert.is_true(core.now() - t0 < 500)
        lock:release()
    end)

    it("excludes its own client: a second try_acquire is 'locked'", function()
        local key = helper.key()
        local lock = assert(client:try_acquire(key))
        local _, _, code = client:try_acquire(key)
        assert.equal("locked", code)
        lock:release()
    end)

    it("acquire gives 'timeout' after about wait", function()
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 10000 }))
        local t0 = core.now()
        local other, err, code = client:acquire(key, { wait = 300 })
        local took = core.now() - t0
        assert.is_nil(other)
        assert.equal("timeout", code)
        assert.matches("^timeout: waited 300 ms for", err)
        -- (it may end a step early: it sends nothing it cannot finish by
        -- the deadline)
        assert.is_true(took >= 250 and took < 1500, "took " .. took)
        lock:release()
    end)

    it("acquire with wait = 0 is one attempt, 'locked'", function()
        local key = helper.key()
        local lock = assert(client:acquire(key))
        local _, _, code = client:acquire(key, { wait = 0 })
        assert.equal("locked", code)
        lock:release()
    end)

    it("expiry: another client gets the lock after the ttl, not before", function()
        local key = helper.key()
        local ttl = helper.ms(400)
        local a = assert(client:acquire(key, { ttl = ttl }))
        local t0 = core.now()
        local other = redlock.new { servers = { server:url() }, retry_delay = 5, retry_jitter = 0 }
        local b = assert(other:acquire(key, { wait = helper.ms(3000) }))
        local took = core.now() - t0
        assert.is_true(took >= ttl - helper.ms(100), "got it too early: " .. took)
        assert.is_true(took < ttl + helper.ms(1100), "got it too late: " .. took)
        assert.are_not.equal(a.token, b.token)
        b:release()
        other:close()
    end)

    it("waiting never sleeps past the holder's expiry", function()
        local key = helper.key()
        assert(client:acquire(key, { ttl = 200 }))
        local t0 = core.now()
        local b = assert(client:acquire(key, { retry_delay = 5000, retry_jitter = 0, wait = 8000 }))
        local took = core.now() - t0
        assert.is_true(took < 1000, "slept past the expiry: " .. took)
        b:release()
    end)

    it("ownership: an expired and retaken lock gives 'not owner' and leaves the new key alone", function()
        helper.needs("set_px")
        local key = helper.key()
        local a = assert(client:acquire(key, { ttl = 100 }))
        helper.sleep(250)
        local b = assert(client:acquire(key, { ttl = 10000 }))
        local ok, err, code = a:release()
        assert.is_nil(ok)
        assert.equal("not owner", code)
        assert.matches("^not owner: ", err)
        local _
        ok, _, code = a:extend(10000)
        assert.is_nil(ok)
        assert.equal("not owner", code)
        assert.equal(b.token, data:command("GET", key))
        assert.is_true(data:command("PTTL", key) > 9000)
        assert.is_true(b:release())
    end)

    it("release twice gives 'not owner' the second time", function()
        local lock = assert(client:acquire(helper.key()))
        assert.is_true(lock:release())
        local ok, err, code = lock:release()
        assert.is_nil(ok)
        assert.equal("not owner", code)
        assert.matches("already released", err)
    end)

    it("extend pushes the expiry out, checking the token", function()
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 1000 }))
        assert.is_true(lock:extend(20000))
        assert.is_true(helper.pttl(data, key) > 19000) -- (legacy mode on 2.4: TTL)
        assert.is_true(lock:remaining() > 19000)
        assert.is_true(lock:extend())
        assert.is_true(lock:release())
        assert.has_error(function() lock:extend(0) end)
    end)

    it("extend of a key someone deleted does not recreate it", function()
        local key = helper.key()
        local lock = assert(client:acquire(key))
        data:command("DEL", key)
        local ok, _, code = lock:extend()
        assert.is_nil(ok)
        assert.equal("not owner", code)
        assert.equal(0, data:command("EXISTS", key))
        assert.equal(0, lock:remaining())
    end)

    it("remaining() counts from before the request and never goes below 0", function()
        local ttl = helper.ms(300)
        local lock = assert(client:acquire(helper.key(), { ttl = ttl }))
        local r = lock:remaining()
        assert.is_true(r <= ttl - ttl * 0.01 - 2, "overstates: " .. r)
        assert.is_true(r > ttl - helper.ms(100))
        helper.sleep(ttl + helper.ms(100))
        assert.equal(0, lock:remaining())
    end)

    it("fence tokens strictly increase, across keys too, start at the server's clock, print whole", function()
        helper.needs("script_time")
        local t = data:command("TIME")
        -- ms since 2026, x 100: the first fence is at least that (equal when
        -- taken in the very millisecond that TIME's whole second began)
        local last = (tonumber(t[1]) * 1000 - 1767225600000) * 100 - 1
        for i = 1, 20 do
            local lock = assert(client:acquire(i % 2 == 0 and helper.key() or "fence-spec-key"))
            assert.equal("number", type(lock.fence))
            assert.is_true(lock.fence > last, lock.fence .. " after " .. last)
            assert.matches("^%d+$", tostring(lock.fence)) -- no exponent, on 5.1 and LuaJIT too
            last = lock.fence
            lock:release()
        end
    end)

    it("keeps one fence counter per server, not a key per name", function()
        local lock = assert(client:acquire(helper.key("{user:1}:job")))
        assert.equal(string.format("%.0f", lock.fence), helper.last_fence(data))
        lock:release()
        assert.equal(0, data:command("EXISTS", "{user:1}:job:fence"))
    end)

    it("works with binary keys", function()
        helper.needs("set_px")
        local key = "bin\0\r\n\255" .. helper.key()
        local lock = assert(client:acquire(key))
        assert.equal(lock.token, data:command("GET", key))
        local _, err, code = client:try_acquire(key)
        assert.equal("locked", code)
        assert.matches("bin\\x00\\x0d\\x0a\\xff", err)
        assert.is_true(lock:release())
    end)

    describe("with_lock", function()
        it("returns true and every result of fn, trailing nils included", function()
            helper.needs("set_px")
            local key = helper.key()
            local function run()
                return client:with_lock(key, function(lock)
                    assert.equal(lock.token, data:command("GET", key))
                    return 1, nil, "three", nil
                end)
            end
            local n = select("#", run())
            local ok, a, b, c = run()
            assert.equal(5, n)
            assert.is_true(ok)
            assert.equal(1, a)
            assert.is_nil(b)
            assert.equal("three", c)
            assert.equal(0, data:command("EXISTS", key))
        end)

        it("takes opts before fn", function()
            local key = helper.key()
            local ok, pttl = client:with_lock(key, { ttl = 7000 }, function()
                return helper.pttl(data, key)
            end)
            assert.is_true(ok)
            assert.is_true(pttl > 6000 and pttl <= 7000, pttl)
        end)

        it("releases when fn raises and re-raises the very same error value", function()
            local key = helper.key()
            local boom = setmetatable({}, { __tostring = function() return "boom" end })
            local ok, err = pcall(client.with_lock, client, key, function() error(boom) end)
            assert.is_false(ok)
            assert.equal(boom, err)
            assert.equal(0, data:command("EXISTS", key))
            ok, err = pcall(client.with_lock, client, key, function() error("plain", 0) end)
            assert.is_false(ok)
            assert.equal("plain", err)
        end)

        it("does not call fn when the lock cannot be taken", function()
            local key = helper.key()
            local lock = assert(client:acquire(key))
            local called = false
            local ok, err, code = client:with_lock(key, { wait = 0 }, function() called = true end)
            assert.is_nil(ok)
            assert.equal("locked", code)
            assert.matches("^locked", err)
            assert.is_false(called)
            lock:release()
        end)

        it("returns false, err, code and fn's results when fn returned and the release failed", function()
            local key = helper.key()
            local c = redlock.new { servers = { server:url() } }
            local r = { c:with_lock(key, function()
                c:close()
                return 1, nil, "three", nil
            end) }
            assert.is_false(r[1])
            assert.matches("^closed: the client is closed; fn ran and returned %(its results follow%)", r[2])
            assert.equal("closed", r[3])
            assert.same({ 1, nil, "three", nil }, { r[4], r[5], r[6], r[7] })
            -- not released: the key stays until its ttl
            assert.is_truthy(helper.pttl(data, key) > 0)
            data:command("DEL", key)
        end)

        it("returns 'not owner' when the lock's validity ran out during fn and the release failed", function()
            local key = helper.key()
            local c = redlock.new { servers = { server:url() } }
            local ok, err, code = c:with_lock(key, { ttl = 100, renew = false }, function(lock)
                assert(helper.eventually(5000, function() return lock:remaining() == 0 end))
                c:close()
                return "done"
            end)
            assert.is_nil(ok)
            assert.equal("not owner", code, err)
            assert.matches("its validity ran out while fn ran; the release failed too: closed", err, 1, true)
        end)

        it("counts a validity with under 1 ms left as ran out, as remaining() does (lost, with_lock)", function()
            local key = helper.key()
            local c = redlock.new { servers = { server:url() } }
            local ok, err, code = c:with_lock(key, { renew = false }, function(lock)
                -- (the client's own record of the validity's end: half a ms from now)
                lock.expires = core.now() + 0.5
                assert.equal(0, lock:remaining())
                assert.is_true((lock:lost()))
                c:close()
                return "done"
            end)
            assert.is_nil(ok)
            assert.equal("not owner", code, err)
            data:command("DEL", key)
        end)

        it("returns 'not owner' when the lock was lost before the release", function()
            local key = helper.key()
            -- renew = false: with_lock renews by default (spec/30 covers that)
            local ok, err, code = client:with_lock(key, { ttl = 100, renew = false }, function()
                helper.sleep(250)
                return "done"
            end)
            assert.is_nil(ok)
            assert.equal("not owner", code)
            assert.matches("^not owner", err)
        end)
    end)

    if _VERSION == "Lua 5.4" then
        it("releases a <close> lock at the end of its scope", function()
            local key = helper.key()
            local f = assert(load([[
                local client, key = ...
                do
                    local lock <close> = assert(client:acquire(key))
                    assert(lock.token)
                end
            ]]))
            f(client, key)
            assert.equal(0, data:command("EXISTS", key))
        end)
    end

    it("recovers from SCRIPT FLUSH (NOSCRIPT) without the caller noticing", function()
        local key = helper.key()
        data:command("SCRIPT", "FLUSH")
        local lock = assert(client:acquire(key))
        data:command("SCRIPT", "FLUSH")
        assert.is_true(lock:extend())
        data:command("SCRIPT", "FLUSH")
        assert.is_true(lock:release())
    end)

    it("interoperates with a plain SET NX PX, both ways", function()
        helper.needs("set_px")
        local key = helper.key()
        assert.equal("OK", server:cli("SET", key, "someone-else", "NX", "PX", "5000"))
        local _, _, code = client:try_acquire(key)
        assert.equal("locked", code)
        assert.equal("someone-else", data:command("GET", key))
        server:cli("DEL", key)
        local lock = assert(client:try_acquire(key))
        assert.equal("", server:cli("SET", key, "other", "NX", "PX", "5000"))
        assert.equal(lock.token, server:cli("GET", key))
        lock:release()
    end)

    it("treats a foreign key without a ttl as held, and says it never expires", function()
        local key = helper.key()
        data:command("SET", key, "forever")
        local _, err, code = client:try_acquire(key)
        assert.equal("locked", code)
        assert.matches("never", err)
        local t0 = core.now()
        _, _, code = client:acquire(key, { wait = 100 })
        assert.equal("timeout", code)
        assert.is_true(core.now() - t0 < 1000)
    end)

    it("after close(), every call returns 'closed'", function()
        local c = redlock.new { servers = { server:url() } }
        local lock = assert(c:acquire(helper.key()))
        assert.is_true(c:close())
        assert.is_true(c:close())
        assert.equal("redlock.client (closed)", tostring(c))
        for _, call in ipairs {
            function() return c:acquire("k") end,
            function() return c:try_acquire("k") end,
            function() return c:with_lock("k", function() end) end,
            function() return lock:release() end,
            function() return lock:extend() end,
        } do
            local v, err, code = call()
            assert.is_nil(v)
            assert.matches("^closed", err)
            assert.equal("closed", code)
        end
    end)

    it("redlock.token() gives distinct 32-hex tokens and VERSION is semver", function()
        assert.matches("^%x+$", redlock.token())
        assert.are_not.equal(redlock.token(), redlock.token())
        assert.matches("^%d+%.%d+%.%d+$", redlock.VERSION)
    end)
end)
