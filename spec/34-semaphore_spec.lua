-- Counting semaphores (opts.limit): at most N holders at once, counted by
-- the resource, between real processes; each permit expires on its own;
-- a freed permit goes to the first waiter; misuse is refused.
local helper = require "helper"
local core = require "redlock.core"

local function read_out(w)
    local f = io.open(w.dir .. "/out")
    local s = f and f:read("*a") or ""
    if f then f:close() end
    return s
end

describe("semaphore (limit = N)", function()
    -- (the kinds\' scripts read the server\'s clock: Redis 3.2+)
    local it = helper.needing(it, "script_time")
    local server, client, data
    setup(function() server, client, data = helper.single_server() end)
    teardown(function() helper.close_all(client, data) end)

    it("limit 3: 6 processes x 40 with_lock, never more than 3 inside, more than 1 seen, all finish",
        function()
            local key, inside = helper.key("sem"), helper.key("inside")
            local workers = {}
            for i = 1, 6 do
                workers[i] = helper.spawn("spec/workers/permits.lua", server:url(), key, inside, 3, 40)
            end
            local most = 0
            for i = 1, 6 do
                local status, out = workers[i]:wait(120000)
                assert.equal(0, status, out)
                local n, m = out:match("done (%d+) max (%d+)")
                assert.equal("40", n, out)
                most = math.max(most, tonumber(m))
            end
            assert.is_true(most <= 3, "more than 3 inside: " .. most)
            assert.is_true(most > 1, "never more than one inside")
            assert.equal("0", data:command("GET", inside))
            assert.equal(0, data:command("EXISTS", key))
        end)

    it("a SIGKILLed holder's permit frees after its ttl; the other permits stay held", function()
        local key = helper.key("sem")
        local a = assert(client:acquire(key, { limit = 3, ttl = 60000 }))
        local b = assert(client:acquire(key, { limit = 3, ttl = 60000 }))
        local w = helper.spawn("spec/workers/hold_permit.lua", server:url(), key, 3, 1500)
        assert(helper.eventually(10000, function() return read_out(w):find("held") end), read_out(w))
        local pid = read_out(w):match("held %x+ %d+ (%d+)")
        assert(os.execute("kill -KILL " .. pid))
        local _, _, code = client:try_acquire(key, { limit = 3 })
        assert.equal("locked", code)
        -- a waiter gets the dead holder's permit once its ttl has passed
        local c, err = client:acquire(key, { limit = 3, wait = 10000 })
        assert.truthy(c, err)
        assert.is_true(c.fence > b.fence and b.fence > a.fence)
        -- a and b kept theirs all along
        assert.is_true(a:extend())
        assert.is_true(b:extend())
        assert.equal(3, data:command("ZCARD", key) - 1)
        assert(a:release() and b:release() and c:release())
        assert.equal(0, data:command("EXISTS", key))
    end)

    it("a permit given back goes to the first waiter (FIFO hand-off)", function()
        local key = helper.key("sem")
        local held = assert(client:acquire(key, { limit = 1, ttl = 60000 }))
        local waiters_key = "{" .. key .. "}:waiters"
        local first = helper.spawn("spec/workers/hold_permit.lua", server:url(), key, 1, 60000, 20000)
        assert(helper.eventually(10000, function() return data:command("ZCARD", waiters_key) == 1 end))
        local second = helper.spawn("spec/workers/hold_permit.lua", server:url(), key, 1, 60000, 3000)
        assert(helper.eventually(10000, function() return data:command("ZCARD", waiters_key) == 2 end))
        assert.is_true(held:release())
        local status, out = first:wait(20000)
        assert.equal(0, status, out)
        local token = out:match("^held (%x+)")
        assert.truthy(token, out)
        status, out = second:wait(20000)
        assert.equal(0, status, out)
        assert.matches("failed timeout", out)
        -- the first waiter's permit (its process exited without releasing)
        assert.truthy(tonumber(data:command("ZSCORE", key, token)))
        data:command("DEL", key)
    end)

    it("permits renew in the background (with_lock) past their ttl", function()
        local key = helper.key("sem")
        local ok, lost = client:with_lock(key, { limit = 2, ttl = helper.ms(300) }, function(p)
            core.sleep(helper.ms(1000))
            return p:lost()
        end)
        assert.is_true(ok)
        assert.is_false(lost)
        assert.equal(0, data:command("EXISTS", key))
        -- a permit taken away by hand: its renewal finds it gone, on_lost runs
        local told
        local p = assert(client:acquire(key, { limit = 2, ttl = helper.ms(300), renew = true,
            on_lost = function(_, why) told = why end }))
        local other = assert(client:acquire(key, { limit = 2, ttl = 60000 }))
        data:command("ZREM", key, p.token)
        assert(helper.eventually(5000, function() return p:lost() end))
        local _, _, code = p:release()
        assert.equal("not owner", code)
        assert.equal("gone", told)
        assert.is_true(other:extend())
        assert(other:release())
    end)

    it("refuses misuse: another limit while held, a single lock of a semaphore key, limit 0", function()
        local key = helper.key("sem")
        local p = assert(client:acquire(key, { limit = 2 }))
        local _, err, code = client:try_acquire(key, { limit = 3 })
        assert.equal("misuse", code)
        assert.matches("limit 2, not 3", err, 1, true)
        _, err, code = client:try_acquire(key)
        assert.equal("misuse", code)
        assert.matches("held as a semaphore", err, 1, true)
        _, _, code = client:acquire(key, { wait = 200 })
        assert.equal("misuse", code)
        assert.has_error(function() client:acquire(key, { limit = 0 }) end,
            "bad option 'limit' to 'acquire' (integer from 1 to 1000000 expected, got 0)")
        assert.has_error(function() client:acquire({ key }, { limit = 2 }) end)
        -- the plain commands see the key held
        assert.equal(core.null, data:command("SET", key, "x", "NX"))
        -- a semaphore on a single lock's key
        local single = helper.key("single")
        local l = assert(client:acquire(single))
        _, err, code = client:try_acquire(single, { limit = 2 })
        assert.equal("misuse", code, err)
        assert(l:release() and p:release())
        -- a free key takes any limit again
        p = assert(client:try_acquire(key, { limit = 3 }))
        assert(p:release())
        -- a single lock released after its key became a semaphore: not owner
        local gone = assert(client:acquire(single, { ttl = 100 }))
        helper.sleep(200)
        local other = assert(client:acquire(single, { limit = 2 }))
        _, _, code = gone:release()
        assert.equal("not owner", code)
        _, _, code = gone:extend()
        assert.equal("not owner", code)
        assert(other:release())
    end)

    it("refuses a semaphore over Redlock and in legacy mode, with the reason", function()
        local redlock = require "redlock"
        local s2, s3 = helper.start_server(), helper.start_server()
        local rl = redlock.new { servers = { server:url(), s2:url(), s3:url() } }
        assert.has_error(function() rl:acquire("k", { limit = 2 }) end)
        local ok, err = pcall(rl.acquire, rl, "k", { limit = 2 })
        assert.is_false(ok)
        assert.matches("two majorities may overlap", err, 1, true)
        rl:close()
        local legacy = redlock.new { servers = { server:url() }, mode = "legacy" }
        ok, err = pcall(legacy.try_acquire, legacy, "k", { limit = 2 })
        assert.is_false(ok)
        assert.matches("legacy mode", err, 1, true)
        legacy:close()
        s2:stop()
        s3:stop()
        -- mode "auto" on a server without scripting: said plainly, at run time
        local noscript = helper.start_server { config = { 'rename-command EVAL ""', 'rename-command EVALSHA ""',
            'rename-command SCRIPT ""', 'rename-command FUNCTION ""', 'rename-command FCALL ""' } }
        local auto = redlock.new { servers = { noscript:url() } }
        local _, code
        _, err, code = auto:try_acquire("k", { limit = 2 })
        assert.equal("server", code)
        assert.matches("a permit needs the server's scripts, which it refuses", err, 1, true)
        -- that settled the server's mode (legacy), as a single lock's first acquire does
        assert.equal("legacy", auto.servers[1]:chosen_mode())
        -- and said again at run time for another kind (never raised: the
        -- server may be given scripting back)
        ok, err, code = auto:try_acquire({ "a", "b" })
        assert.is_nil(ok)
        assert.equal("server", code)
        assert.matches("a group lock needs the server's scripts", err, 1, true)
        ok, err, code = auto:try_acquire("k", { shared = true })
        assert.is_nil(ok)
        assert.equal("server", code)
        assert.matches("a read lock needs the server's scripts", err, 1, true)
        auto:close()
        -- the same for a group or readers met first
        for _, call in ipairs { { { "a", "b" }, nil, "a group lock" }, { "k", { shared = true }, "a read lock" } } do
            auto = redlock.new { servers = { noscript:url() } }
            _, err, code = auto:try_acquire(call[1], call[2])
            assert.equal("server", code)
            assert.matches(call[3] .. " needs the server's scripts", err, 1, true)
            auto:close()
        end
        noscript:stop()
    end)

    it("permits that expire unreleased leave nothing behind", function()
        local before = data:command("DBSIZE")
        local key = helper.key("sem")
        for _ = 1, 3 do assert(client:acquire(key, { limit = 3, ttl = 150 })) end
        local _, _, code = client:acquire(key, { limit = 3, ttl = 150, wait = 50 })
        assert.equal("timeout", code)
        assert(helper.eventually(5000, function() return data:command("DBSIZE") <= before end))
        assert.equal(before, data:command("DBSIZE"))
    end)

    it("never changes another application's sorted set: acquire, release and extend", function()
        local key = helper.key("jobs:delayed")
        local t = data:command("TIME")
        local ms = tonumber(t[1]) * 1000
        -- a delay queue: job -> due ms, most of them due already
        for i = 1, 5 do data:command("ZADD", key, ms - i * 1000, "job" .. i) end
        data:command("ZADD", key, ms + 60000, "later")
        local _, err, code = client:try_acquire(key, { limit = 3 })
        assert.equal("misuse", code, err)
        local permit = require("redlock.semaphore").strategy(3)
        local ok, _, c = permit.release(client, key, "job1")
        assert.is_nil(ok)
        assert.equal("misuse", c)
        assert.is_false((permit.extend(client, key, "job1", 5000)))
        assert.is_false((client.strategy.extend(client, key, "later", 5000)))
        assert.equal(6, data:command("ZCARD", key))
        assert.equal(-1, data:command("PTTL", key))
        data:command("DEL", key)
    end)

    it("mode auto: a permit's waiter is notified, and one that timed out leaves the queue", function()
        local notify = require "redlock.notify"
        local redlock = require "redlock"
        local key = helper.key("ghost")
        local c = redlock.new { servers = { server:url() }, retry_delay = 10, retry_jitter = 0 }
        local p = assert(c:acquire(key, { limit = 1, ttl = 60000 }))
        assert.equal("script", c.servers[1]:chosen_mode())
        local _, _, code = c:acquire(key, { limit = 1, ttl = 60000, wait = 300 })
        assert.equal("timeout", code)
        -- it left: the release hands its permit to nobody, a newcomer gets it
        assert.equal(0, data:command("EXISTS", notify.waiters_key(key)))
        assert(p:release())
        local q = assert(c:try_acquire(key, { limit = 1 }))
        assert(q:release())
        c:close()
    end)

    it("fair = false: a permit given back while the first waiter's wait is under the bound goes to the next "
        .. "acquirer, the waiter woken; past the bound it is handed to the waiter before any newcomer; "
        .. "fair = true hands it over whatever the wait", function()
        local notify = require "redlock.notify"
        local sem = require("redlock.semaphore").strategy(1)
        local key = helper.key("barge")
        local token = core.token()
        local list = notify.handoff_key(key, token)
        local function join()
            assert.is_false((sem.acquire(client, key, token, 60000, "5000", true)))
            return data:command("ZSCORE", notify.waiters_key(key), token)
        end
        local was = notify.BARGE_MS
        notify.BARGE_MS = "600000"
        local ok, err = pcall(function()
            local p = assert(client:acquire(key, { limit = 1, ttl = 60000 }))
            local since = join()
            assert(p:release())
            assert.same({ "w", "w" }, data:command("LRANGE", list, 0, -1))
            assert.equal(0, data:command("EXISTS", key)) -- (no permit left: the key is gone)
            -- a newcomer passes the young waiter, which keeps its place
            p = assert(client:try_acquire(key, { limit = 1, ttl = 60000 }))
            assert.equal(since, join())
            assert(p:release())
            assert.is_nil(require("redlock.scripted").give_up(client.servers[1], key, token))
            -- fair = true: the release hands it over at once
            p = assert(client:acquire(key, { limit = 1, ttl = 60000, fair = true }))
            join()
            assert(p:release())
            assert.truthy(tonumber(data:command("ZSCORE", key, token)))
            data:command("DEL", key)
        end)
        notify.BARGE_MS = was
        assert(ok, err)
        -- past the bound (the server's clock): handed before any newcomer
        local p = assert(client:acquire(key, { limit = 1, ttl = 60000 }))
        local since = tonumber(join())
        assert(helper.server_clock_past(data, tonumber(notify.BARGE_MS) * 1000, since))
        assert(p:release())
        assert.truthy(tonumber(data:command("ZSCORE", key, token)))
        local _, _, code = client:try_acquire(key, { limit = 1 })
        assert.equal("locked", code)
        require("redlock.scripted").give_up(client.servers[1], key, token)
        data:command("DEL", key, list)
    end)

    it("a live waiter of another limit is misuse, also when no permit is held", function()
        local notify = require "redlock.notify"
        local key = helper.key("limits")
        local p = assert(client:acquire(key, { limit = 1, ttl = 100 }))
        -- a waiter of limit 1 queued (the script's waiting path, without blocking)
        local token = core.token()
        local ok = require("redlock.semaphore").strategy(1).acquire(client, key, token, 60000, "5000", true)
        assert.is_false(ok)
        -- the permit expires: no permit is held, the waiter still waits
        assert(helper.eventually(5000, function() return data:command("EXISTS", key) == 0 end))
        local _, err, code = client:try_acquire(key, { limit = 2 })
        assert.equal("misuse", code, err)
        assert.matches("limit 1", err, 1, true)
        require("redlock.scripted").give_up(client.servers[1], key, token)
        assert.equal(0, data:command("EXISTS", notify.waiters_key(key)))
        local q = assert(client:try_acquire(key, { limit = 2 }))
        assert(q:release())
        p:release()
    end)
end)
