-- Background renewal (the C watchdog), its bound, and the lost-lock signal.
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"

local WORKER = "spec/workers/lock_worker.lua"

-- Polls cond every 20 ms for at most ms; returns whether it became true.
local eventually = helper.eventually

describe("renewal", function()
    local server, client, data

    setup(function() server, client, data = helper.single_server() end)
    teardown(function() helper.close_all(client, data) end)

    it("keeps a with_lock (ttl 500) around a 1.6 s fn: another process cannot take it at 1.2 s; "
        .. "afterwards the key is gone and no renewal runs", function()
        local key = helper.key()
        local at = string.format("%.0f", core.now() + helper.ms(1200))
        local worker = helper.spawn(WORKER, "try_at", server:url(), key, at)
        local status, out
        local ok, token = client:with_lock(key, { ttl = helper.ms(500) }, function(lock)
            core.sleep(helper.ms(1600))
            assert.equal(lock.token, data:command("GET", key))
            assert.is_false((lock:lost()))
            -- still holding: the worker tries at 1.2 s, or later if it
            -- started late (under valgrind on a busy machine it can)
            status, out = worker:wait()
            return lock.token
        end)
        assert.is_true(ok, token)
        assert.equal(32, #token)
        assert.equal(0, status, out)
        assert.matches("\nlocked\n", out)
        assert.equal(0, data:command("EXISTS", key))
        local live, renewals, running = client.renewer:stats()
        assert.equal(0, live)
        assert.is_true(renewals >= 4, "renewals: " .. renewals)
        assert.is_true(running)
        core.sleep(helper.ms(500)) -- three renewal periods
        local live2, renewals2 = client.renewer:stats()
        assert.equal(0, live2)
        assert.equal(renewals, renewals2)
        assert.equal(0, data:command("EXISTS", key))
    end)

    it("lock:remaining() reflects the background renewals", function()
        local lock = assert(client:acquire(helper.key(), { ttl = 300, renew = true }))
        core.sleep(700)
        local left = lock:remaining()
        assert.is_true(left > 0 and left <= 300, "remaining " .. left)
        assert.is_false((lock:lost()))
        assert.is_true(lock:release())
        assert.equal(0, lock:remaining())
    end)

    it("acquire does not renew unless asked", function()
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 200 }))
        assert.is_falsy(lock.renewal)
        core.sleep(400)
        assert.equal(0, data:command("EXISTS", key))
        assert.is_true((lock:lost()))
    end)

    it("a key deleted by hand during fn: with_lock returns 'not owner' and on_lost ran", function()
        local key = helper.key()
        local seen, seen_lock
        local ok, err, code = client:with_lock(key, {
            ttl = helper.ms(600),
            on_lost = function(lock, why) seen, seen_lock = why, lock end,
        }, function(lock)
            data:command("DEL", key)
            -- the renewal finds the token gone within one period (200 ms);
            -- lock:lost() reads C memory and runs on_lost first
            assert.is_true(eventually(3000, function() return (lock:lost()) end))
            assert.equal("gone", seen)
            assert.equal(0, lock:remaining())
            return "done"
        end)
        assert.is_nil(ok)
        assert.equal("not owner", code)
        assert.matches("^not owner: .*lost: gone", err)
        assert.equal("gone", seen)
        assert.equal(key, seen_lock.key)
    end)

    it("with_lock of a lock the renewal found lost whose release then fails: 'not owner', not false", function()
        local s2 = helper.start_server()
        local c = redlock.new { servers = { s2:url() }, connect_timeout = 300 }
        local d2 = core.conn(s2:spec())
        local key = helper.key()
        local ok, err, code = c:with_lock(key, { ttl = 600 }, function(lock)
            d2:command("DEL", key)
            assert.is_true(eventually(3000, function() return (lock:lost()) end))
            d2:close()
            s2:kill()
            return "done"
        end)
        assert.is_nil(ok)
        assert.equal("not owner", code, err)
        assert.matches("^not owner: .*%(gone; the release failed too: connection: ", err)
        c:close()
    end)

    it("on_lost also runs when the release is what finds the token gone", function()
        local key = helper.key()
        local calls = 0
        local ok, _, code = client:with_lock(key, {
            ttl = 30000, on_lost = function() calls = calls + 1 end,
        }, function() data:command("DEL", key) end)
        assert.is_nil(ok)
        assert.equal("not owner", code)
        assert.equal(1, calls)
    end)

    it("on_lost runs at the start of the next call on the client", function()
        local key = helper.key()
        local ran = false
        local lock = assert(client:acquire(key, {
            ttl = 300, renew = true, on_lost = function() ran = true end,
        }))
        data:command("DEL", key)
        core.sleep(600) -- no call into the library meanwhile
        assert.is_false(ran)
        assert.is_true(eventually(3000, function()
            client:try_acquire(helper.key(), { ttl = 100 })
            return ran
        end))
        local _, _, code = lock:release()
        assert.equal("not owner", code)
    end)

    it("an error raised by on_lost comes out of with_lock after the release", function()
        local key = helper.key()
        local boom = {}
        local ok, err = pcall(client.with_lock, client, key, {
            ttl = 300, on_lost = function() error(boom) end,
        }, function()
            data:command("DEL", key)
            core.sleep(500)
            data:command("SET", key, "someone-else")
        end)
        assert.is_false(ok)
        assert.equal(boom, err)
        assert.equal("someone-else", data:command("GET", key))
    end)

    it("on_lost runs before the release: the key is deleted even when on_lost raises", function()
        local key = helper.key()
        local boom = {}
        local ok, err = pcall(client.with_lock, client, key, {
            ttl = 300, on_lost = function() error(boom) end,
        }, function(lock)
            data:command("DEL", key)
            core.sleep(500) -- the renewal finds the token gone
            -- our token back: a release must still delete it
            data:command("SET", key, lock.token, "PX", 60000)
        end)
        assert.is_false(ok)
        assert.equal(boom, err)
        assert.equal(0, data:command("EXISTS", key))
    end)

    it("renewal stops at max_hold, then the key expires on its own and the lock is lost", function()
        local key = helper.key()
        local why
        local t0 = core.now()
        local lock = assert(client:acquire(key, {
            ttl = 300, renew = true, max_hold = 900, on_lost = function(_, w) why = w end,
        }))
        core.sleep(600)
        assert.equal(lock.token, data:command("GET", key)) -- renewed past its ttl
        assert.is_true(eventually(3000, function() return data:command("EXISTS", key) == 0 end))
        local gone = core.now() - t0
        assert.is_true(gone >= 700 and gone < 2500, "gone after " .. gone)
        local lost, reason = lock:lost()
        assert.is_true(lost)
        assert.equal("max_hold", reason)
        assert.equal("max_hold", why)
        assert.equal(0, lock:remaining())
        local _, _, code = lock:release()
        assert.equal("not owner", code)
    end)

    it("lost() that finds the validity run out by the clock runs on_lost then, once", function()
        local key = helper.key()
        local calls = {}
        local lock = assert(client:acquire(key, {
            ttl = 100, renew = false, on_lost = function(_, w) calls[#calls + 1] = w end,
        }))
        assert.is_false((lock:lost()))
        assert.same({}, calls)
        core.sleep(150)
        local lost, reason = lock:lost()
        assert.is_true(lost)
        assert.equal("expired", reason)
        assert.same({ "expired" }, calls)
        assert.is_true((lock:lost()))
        assert.same({ "expired" }, calls)
    end)

    it("lost() and remaining() answer from memory, without a round trip", function()
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 300, renew = true }))
        data:command("DEL", key)
        assert.is_true(eventually(3000, function() return lock.renewal:lost() ~= nil end))
        local function processed()
            return tonumber(data:command("INFO", "stats"):match("total_commands_processed:(%d+)"))
        end
        local before = processed()
        for _ = 1, 100 do
            assert.is_true((lock:lost()))
            assert.equal(0, lock:remaining())
        end
        assert.equal(before + 1, processed()) -- the second INFO only
    end)

    it("extend() on a renewing lock sets the ttl the renewals use", function()
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 300, renew = true }))
        assert.is_true(lock:extend(3000))
        core.sleep(1300) -- one renewal, 1 s after the extend
        local pttl = data:command("PTTL", key)
        assert.is_true(pttl > 2000, "pttl " .. pttl)
        assert.is_true(lock:remaining() > 1500)
        assert.is_true(lock:release())
    end)

    it("renews in legacy mode too (WATCH/MULTI in the renewal thread); not without WATCH", function()
        local c = redlock.new { servers = { server:url() }, mode = "legacy" }
        local ok, renewal = c:with_lock(helper.key(), { ttl = 2000 }, function(lock) return lock.renewal end)
        assert.is_true(ok)
        assert.truthy(renewal)
        c:close()
        local nowatch = helper.start_server { config = { 'rename-command WATCH ""' } }
        c = redlock.new { servers = { nowatch:url() }, mode = "legacy" }
        ok, renewal = c:with_lock(helper.key(), { ttl = 2000 }, function(lock) return lock.renewal end)
        assert.is_true(ok)
        assert.is_falsy(renewal)
        assert.is_falsy(c.renewer) -- (no renewal thread made)
        c:close()
        nowatch:stop()
    end)

    describe("lifetime", function()
        it("close() stops and joins the thread; release stops the lock's renewal", function()
            local base = core.renew_threads()
            local c = redlock.new { servers = { server:url() } }
            local key = helper.key()
            local lock = assert(c:acquire(key, { ttl = 300, renew = true }))
            assert.equal(base + 1, core.renew_threads())
            assert.equal(1, (c.renewer:stats()))
            assert.is_true(lock:release())
            assert.equal(0, (c.renewer:stats()))
            c:close()
            assert.equal(base, core.renew_threads())
            assert.is_false(select(3, c.renewer:stats()))
        end)

        it("a loop of short with_lock calls leaves no entries behind (the thread sleeps meanwhile)",
            function()
            local c = redlock.new { servers = { server:url() }, ttl = 60000 }
            local key = helper.key()
            local fn = function() end
            for _ = 1, 2000 do assert(c:with_lock(key, fn)) end
            local live, _, running, listed = c.renewer:stats()
            assert.equal(0, live)
            assert.is_true(running)
            -- released locks leave the list at once, not when the thread
            -- wakes (20 s from now with this ttl)
            assert.is_true(listed <= 1, listed .. " entries listed")
            assert.is_nil(next(c.renewing))
            c:close()
        end)

        it("a lock due before the thread's next wake-up is renewed in time", function()
            local c = redlock.new { servers = { server:url() } }
            local long = assert(c:acquire(helper.key(), { ttl = 30000, renew = true }))
            core.sleep(50) -- the thread now sleeps until ~10 s from now
            local key = helper.key()
            local short = assert(c:acquire(key, { ttl = 300, renew = true }))
            core.sleep(1000)
            assert.is_false((short:lost()))
            local pttl = data:command("PTTL", key)
            assert.is_true(pttl > 0, "the key expired: not renewed")
            assert.is_true(select(3, short.renewal:state()) >= 2, "renewals of the short lock")
            assert.is_true(short:release())
            assert.is_true(long:release())
            c:close()
        end)

        it("garbage collection of the lock stops its renewal; the key then expires", function()
            local key = helper.key()
            do
                local lock = assert(client:acquire(key, { ttl = 300, renew = true }))
                assert.truthy(lock.renewal)
            end
            collectgarbage()
            collectgarbage()
            assert.equal(0, (client.renewer:stats()))
            assert.is_true(eventually(3000, function() return data:command("EXISTS", key) == 0 end))
        end)

        it("garbage collection of the client joins its thread", function()
            local base = core.renew_threads()
            local key = helper.key()
            do
                local c = redlock.new { servers = { server:url() } }
                assert(c:acquire(key, { ttl = 300, renew = true }))
                assert.equal(base + 1, core.renew_threads())
            end
            collectgarbage()
            collectgarbage()
            assert.equal(base, core.renew_threads())
            assert.is_true(eventually(3000, function() return data:command("EXISTS", key) == 0 end))
        end)

        it("close() does not wait for a server that stopped answering", function()
            local frozen = helper.start_server()
            local base = core.renew_threads()
            local c = redlock.new { servers = { frozen:url() }, timeout = 20000 }
            assert(c:acquire(helper.key(), { ttl = 300, renew = true }))
            frozen:freeze()
            core.sleep(300) -- the thread now waits for a reply that does not come
            local t0 = core.now()
            c:close()
            local took = core.now() - t0
            frozen:thaw()
            assert.equal(base, core.renew_threads())
            assert.is_true(took < 5000, "close took " .. took)
            frozen:stop()
        end)

        -- Whether a process is stopped (SIGSTOP) now.
        local function frozen_now(s)
            local f = io.open("/proc/" .. s.pid .. "/stat")
            local state = f:read("*l"):match("^%d+ %b() (%a)")
            f:close()
            return state == "T"
        end

        -- The thread's idle connections are cut (CLIENT KILL), then one
        -- server frozen for 5 s: the next round finds its connections
        -- stale and opens new ones within the round, one of them to the
        -- frozen server. close() shuts down a socket still being set up
        -- too: it returns while the server is frozen (it waited for the
        -- thaw, or up to twice the timeout, before).
        local function closes_during_setup(servers, opts)
            local c = redlock.new(opts)
            assert(c:acquire(helper.key(), { ttl = 1500, renew = true })) -- a round every 500 ms
            for _, s in ipairs(servers) do s:cli("CLIENT", "KILL", "TYPE", "normal") end
            servers[1]:freeze()
            servers[1]:signal_later(5000, "CONT")
            helper.sleep(800)
            c:close()
            local still = frozen_now(servers[1])
            servers[1]:thaw()
            assert.is_true(still, "close() waited for the frozen server")
            for _, s in ipairs(servers) do s:stop() end
        end

        it("close() does not wait for a connection the thread opens in a round (AUTH on a frozen server)",
            function()
            local s = helper.start_server { password = "pw" }
            local url = string.format("redis://:pw@127.0.0.1:%d", s.port)
            closes_during_setup({ s }, { servers = { url }, timeout = 20000 })
        end)

        it("close() does not wait for a connection the fan-out opens in a round (Redlock)", function()
            local servers, urls = {}, {}
            for i = 1, 3 do
                servers[i] = helper.start_server()
                urls[i] = servers[i]:url()
            end
            closes_during_setup(servers, { servers = urls, server_timeout = 3000, timeout = 20000 })
        end)
    end)

    describe("on three servers (Redlock)", function()
        local servers, conns

        setup(function()
            servers, conns = {}, {}
            for i = 1, 3 do
                servers[i] = helper.start_server()
                conns[i] = core.conn(servers[i]:spec())
            end
        end)
        teardown(function()
            for i = 1, 3 do conns[i]:close() end
        end)

        local function set_all(key, token, ttl)
            for i = 1, 3 do
                if servers[i].pid and helper.alive(servers[i].pid) then
                    assert(conns[i]:command("SET", key, token, "PX", ttl))
                end
            end
        end

        it("a Redlock client renews on every server, and goes on with one of three down", function()
            local urls = {}
            for i = 1, 3 do urls[i] = servers[i]:url() end
            -- (server_timeout: ttl 500 would give 10 ms, too short under valgrind)
            local c = redlock.new { servers = urls, server_timeout = 200 }
            local key = helper.key()
            local ok, err = c:with_lock(key, { ttl = helper.ms(500) }, function(lock)
                core.sleep(helper.ms(800))
                for i = 1, 3 do assert.equal(lock.token, conns[i]:command("GET", key)) end
                servers[2]:kill()
                core.sleep(helper.ms(1000))
                assert.equal(lock.token, conns[1]:command("GET", key))
                assert.equal(lock.token, conns[3]:command("GET", key))
                assert.is_false((lock:lost()))
                assert.is_true(lock:remaining() > 0)
            end)
            assert.is_true(ok, err)
            assert.equal(0, conns[1]:command("EXISTS", key))
            c:close()
            servers[2]:restart()
            conns[2]:close()
            conns[2] = core.conn(servers[2]:spec())
        end)

        it("counts a renewal with a majority and marks the lock lost without one", function()
            local renewer = core.renewer(conns)
            local key, token = helper.key(), core.token()
            set_all(key, token, helper.ms(600))
            local h = renewer:add(key, token, helper.ms(600), core.now() + helper.ms(592), core.now() + 60000, 2,
                0.01)
            -- a second lock: two servers say its token is gone
            local key2, token2 = helper.key(), core.token()
            set_all(key2, token2, 3000)
            local h2 = renewer:add(key2, token2, helper.ms(300), core.now() + helper.ms(295), core.now() + 60000,
                2, 0.01)
            conns[1]:command("DEL", key2)
            conns[2]:command("SET", key2, "someone-else")
            assert.is_true(eventually(3000, function() return h2:lost() ~= nil end))
            assert.equal("gone", h2:lost())

            core.sleep(helper.ms(500))
            for i = 1, 3 do assert.equal(token, conns[i]:command("GET", key)) end
            servers[3]:kill() -- one of three down: a majority still renews
            local _, _, before = h:state()
            core.sleep(helper.ms(1200)) -- six rounds due, one every 200 ms (4x both under valgrind)
            local phase, _, after, failures = h:state()
            assert.equal("renewing", phase)
            assert.is_true(after >= before + 3, "renewals " .. before .. " -> " .. after)
            assert.is_true(failures == 0, "failures " .. failures)
            for i = 1, 2 do assert.equal(token, conns[i]:command("GET", key)) end
            assert.is_nil(h:lost())

            -- one yes, one no, one down: no majority, so the validity runs out.
            -- A lock of its own with a ttl of 3 s: its failed rounds (the
            -- first at 1 s) come long before its expiry even when the thread
            -- is scheduled late (valgrind), so the error they record is there.
            local key3, token3 = helper.key(), core.token()
            set_all(key3, token3, 3000) -- on the two servers that are up
            local h3 = renewer:add(key3, token3, 3000, core.now() + 2950, core.now() + 60000, 2, 0.01)
            conns[1]:command("DEL", key3)
            assert.is_true(eventually(10000, function() return h3:lost() ~= nil end))
            assert.equal("expired", h3:lost())
            local _, _, renewals3, failures3, _, err = h3:state()
            assert.equal(0, renewals3)
            assert.is_true(failures3 >= 1, "failures " .. failures3)
            assert.matches("^connection: ", err) -- the server that is down
            assert.equal(token, conns[1]:command("GET", key)) -- the first lock renews on
            assert.is_nil(h:lost())
            renewer:close()
        end)
    end)
end)
