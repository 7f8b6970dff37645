-- Re-entrant locks: the same owner takes a key it holds again at once.
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"

describe("re-entrant locks", function()
    local server, client, data

    setup(function() server, client, data = helper.single_server() end)
    teardown(function() helper.close_all(client, data) end)

    local R = { reentrant = true }

    it("nests with_lock two deep; the key is freed only at the outer release", function()
        local key = helper.key()
        local ok, inner_token, outer_token = client:with_lock(key, R, function(outer)
            local t0 = core.now()
            local iok, token = client:with_lock(key, R, function(inner)
                assert.equal(outer, inner)
                assert.equal(2, inner.holds)
                return inner.token
            end)
            assert.is_true(iok)
            assert.is_true(core.now() - t0 < 1000)
            assert.equal(1, outer.holds)
            assert.equal(outer.token, data:command("GET", key)) -- still held
            return token, outer.token
        end)
        assert.is_true(ok)
        assert.equal(outer_token, inner_token)
        assert.equal(0, data:command("EXISTS", key))
    end)

    it("nests acquire three deep; counts the holds; the value stays the plain token", function()
        local key = helper.key()
        local a = assert(client:acquire(key, R))
        local b = assert(client:acquire(key, R))
        local c = assert(client:try_acquire(key, R))
        assert.equal(a, b)
        assert.equal(a, c)
        assert.equal(3, a.holds)
        assert.equal(a.token, data:command("GET", key))
        assert.equal("", server:cli("SET", key, "other", "NX", "PX", "5000")) -- interop
        assert.is_true(c:release())
        assert.is_true(b:release())
        assert.equal(a.token, data:command("GET", key))
        assert.is_true(a:release())
        assert.equal(0, data:command("EXISTS", key))
        local ok, err, code = a:release()
        assert.is_nil(ok)
        assert.equal("not owner", code)
        assert.matches("already released", err)
        -- released for good: the next re-entrant acquire takes it afresh
        local d = assert(client:acquire(key, R))
        assert.are_not.equal(a.token, d.token)
        assert.is_true(d.fence > a.fence)
        assert.is_true(d:release())
    end)

    it("without reentrant, a second acquire by the same client waits as any other", function()
        local key = helper.key()
        local lock = assert(client:acquire(key, R))
        local t0 = core.now()
        local other, err, code = client:acquire(key, { wait = 300 })
        local took = core.now() - t0
        assert.is_nil(other)
        assert.equal("timeout", code)
        assert.matches("^timeout", err)
        -- (it ends at the deadline, or up to half a round trip before it
        -- where one more attempt would answer too late: acquire's retry)
        assert.is_true(took >= 250 and took < 3000, "took " .. took)
        local _, _, tcode = client:try_acquire(key)
        assert.equal("locked", tcode)
        assert.equal(1, lock.holds)
        assert.is_true(lock:release())
    end)

    it("the owner is the client by default: another client is excluded", function()
        local key = helper.key()
        local other = redlock.new { servers = { server:url() } }
        local lock = assert(client:acquire(key, R))
        local _, _, code = other:try_acquire(key, R)
        assert.equal("locked", code)
        assert.is_true(lock:release())
        other:close()
    end)

    it("opts.owner makes one owner per coroutine on a shared client", function()
        local key = helper.key()
        local co1, co2
        local results = {}
        co1 = coroutine.create(function()
            local a = assert(client:acquire(key, { reentrant = true, owner = co1 }))
            coroutine.yield()
            local b = assert(client:try_acquire(key, { reentrant = true, owner = co1 }))
            results.same = a == b
            assert(b:release())
            coroutine.yield()
            assert(a:release())
        end)
        co2 = coroutine.create(function()
            local lock, _, code = client:try_acquire(key, { reentrant = true, owner = co2 })
            results.co2 = lock and "acquired" or code
        end)
        assert(coroutine.resume(co1))
        assert(coroutine.resume(co2))
        assert.equal("locked", results.co2)
        assert(coroutine.resume(co1))
        assert.is_true(results.same)
        assert.equal(1, data:command("EXISTS", key))
        assert(coroutine.resume(co1))
        assert.equal(0, data:command("EXISTS", key))
        assert.has_error(function() client:acquire(key, { reentrant = true, owner = 0 / 0 }) end)
    end)

    it("a re-entry tops the validity up to its ttl, checking the token", function()
        local key = helper.key()
        local lock = assert(client:acquire(key, { reentrant = true, ttl = helper.ms(1000) }))
        core.sleep(helper.ms(300))
        assert(client:acquire(key, { reentrant = true, ttl = 5000 }))
        assert.is_true(data:command("PTTL", key) > 4000)
        assert.is_true(lock:remaining() > 4000)
        assert.is_true(lock:release())
        assert.is_true(lock:release())
    end)

    it("a lost lock is not re-entered: the owner takes the key afresh", function()
        local key = helper.key()
        local lost_seen
        local old = assert(client:acquire(key, {
            reentrant = true, on_lost = function() lost_seen = true end,
        }))
        data:command("DEL", key)
        local new = assert(client:acquire(key, R))
        assert.are_not.equal(old, new)
        assert.equal(1, new.holds)
        assert.equal(new.token, data:command("GET", key))
        assert.is_true(lost_seen)
        local _, _, code = old:release()
        assert.equal("not owner", code)
        assert.equal(new.token, data:command("GET", key)) -- untouched
        assert.is_true(new:release())
    end)

    it("an inner with_lock renews a lock the outer acquire took without renewal", function()
        local key = helper.key()
        local lock = assert(client:acquire(key, { reentrant = true, ttl = helper.ms(300) }))
        assert.is_falsy(lock.renewal)
        local ok = client:with_lock(key, { reentrant = true, ttl = helper.ms(300) }, function(l)
            assert.truthy(l.renewal)
            core.sleep(helper.ms(700))
        end)
        assert.is_true(ok)
        assert.equal(lock.token, data:command("GET", key)) -- renewed, still held
        assert.is_true(lock:release())
        assert.equal(0, data:command("EXISTS", key))
    end)

    it("releases each hold of a <close> nest in turn", function()
        if _VERSION ~= "Lua 5.4" then return end
        local key = helper.key()
        local f = assert(load([[
            local client, key, data = ...
            local lock <close> = assert(client:acquire(key, { reentrant = true }))
            do
                local again <close> = assert(client:acquire(key, { reentrant = true }))
                assert(again.holds == 2)
            end
            assert(data:command("GET", key) == lock.token)
        ]]))
        f(client, key, data)
        assert.equal(0, data:command("EXISTS", key))
    end)
end)
