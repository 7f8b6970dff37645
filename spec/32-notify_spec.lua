-- Notified waiting: waiters block in BLPOP on a hand-off list of their own,
-- which the release script fills when it hands them the lock (or on the
-- wake-up list, for waiters that are only woken); never longer than the
-- holder's PTTL or the waiter's remaining wait.
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"

local WORKER = "spec/workers/lock_worker.lua"

local eventually = helper.eventually

-- The output a worker printed so far.
local function output(worker)
    local f = io.open(worker.dir .. "/out")
    if not f then return "" end
    local out = f:read("*a")
    f:close()
    return out
end

describe("notified waiting", function()
    local server, client, data

    setup(function()
        server = helper.start_server()
        client = redlock.new { servers = { server:url() } }
        data = core.conn(server:spec())
    end)
    teardown(function()
        client:close()
        data:close()
        helper.stop_all()
    end)

    -- How many clients are blocked in BLPOP now.
    local function blocked()
        local n = 0
        for line in data:command("CLIENT", "LIST"):gmatch("[^\n]+") do
            if line:find("cmd=blpop", 1, true) and line:find("flags=b", 1, true) then n = n + 1 end
        end
        return n
    end

    -- Until the server's own clock says the waiter `token` of key has waited
    -- longer than notify.BARGE_MS (its place's score): a release then hands
    -- it the lock whatever fair says.
    local notify = require "redlock.notify"
    local function grow_old(key, token)
        local since = tonumber(data:command("ZSCORE", "{" .. key .. "}:waiters", token))
        assert.is_true(helper.server_clock_past(data, tonumber(notify.BARGE_MS) * 1000, since))
    end

    -- (Redis 2.6 and 2.8 count EVALSHA as eval)
    local evalsha = helper.lacks("evalsha_stats") and "eval" or "evalsha"
    local function evalsha_calls()
        local info = data:command("INFO", "commandstats")
        return tonumber(info:match("cmdstat_" .. evalsha .. ":calls=(%d+)")) or 0
    end
    local function set_calls()
        local info = data:command("INFO", "commandstats")
        return tonumber(info:match("cmdstat_set:calls=(%d+)")) or 0
    end

    it("with retry_delay 2000, a waiter in another process gets the lock soon after the release, "
        .. "and does not poll meanwhile", function()
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 10000 }))
        local worker = helper.spawn(WORKER, "wait", server:url(), key, 2000, 8000)
        assert.is_true(eventually(5000, function() return blocked() == 1 end), "no waiter in BLPOP")
        local calls = evalsha_calls()
        core.sleep(500)
        assert.equal(calls, evalsha_calls(), "the waiter polled")
        local released_at = core.now()
        assert.is_true(lock:release())
        local status, out = worker:wait()
        assert.equal(0, status, out)
        local got = tonumber(out:match("acquired (%S+)"))
        assert.is_true(got - released_at < 1000, "waited " .. (got - released_at) .. " ms after the release")
    end)

    it("a crashed holder (SIGKILL) is succeeded right after its ttl, not after wait", function()
        local key = helper.key()
        local holder = helper.spawn(WORKER, "hold", server:url(), key, 1500)
        assert.is_true(eventually(5000, function() return output(holder):find("held") ~= nil end))
        local held_at = core.now()
        local pid = output(holder):match("pid (%d+)")
        os.execute("kill -KILL " .. pid)
        local lock = assert(client:acquire(key, { wait = 8000, retry_delay = 5000, retry_jitter = 0 }))
        local took = core.now() - held_at
        -- (not retry_delay's 5000 ms: the sleep ends at the holder's pttl)
        assert.is_true(took < 4500, "took " .. took .. " ms")
        assert.is_true(lock:release())
        holder:wait()
    end)

    it("the release hands the lock to the blocked waiter in the same step: no claim follows, "
        .. "and a newcomer is refused", function()
        helper.needs("script_time")
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 10000 }))
        local worker = helper.spawn(WORKER, "wait", server:url(), key, 2000, 8000, "notify", 1000)
        assert.is_true(eventually(5000, function() return blocked() == 1 end), "no waiter in BLPOP")
        local queued = data:command("ZRANGE", "{" .. key .. "}:waiters", 0, -1)
        assert.equal(1, #queued)
        grow_old(key, queued[1])
        local calls = evalsha_calls()
        assert.is_true(lock:release())
        -- handed over by the release itself: the key holds the waiter's token
        assert.equal(queued[1], data:command("GET", key))
        local _, _, code = client:try_acquire(key)
        assert.equal("locked", code)
        assert.is_true(eventually(5000, function() return output(worker):find("acquired") ~= nil end))
        -- the release (two: the first after waiters came asks, then hands
        -- over) and the newcomer's try; the waiter sent nothing more to get
        -- the lock (it holds it for 1 s before its own release)
        assert.equal(calls + 3, evalsha_calls())
        local status, out = worker:wait()
        assert.equal(0, status, out)
        assert.is_true(tonumber(out:match("fence (%d+)")) > lock.fence)
        assert.matches("handed", out)
        for _, suffix in ipairs { ":waiters", ":waiting", ":wake", ":handoff:" .. queued[1] } do
            assert.equal(0, data:command("EXISTS", "{" .. key .. "}" .. suffix), suffix)
        end
    end)

    it("a handed lock's validity counts from the release, and never past the key's expiry", function()
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 10000 }))
        local worker = helper.spawn(WORKER, "wait", server:url(), key, 2000, 8000, "notify", 1500, 3000)
        assert.is_true(eventually(5000, function() return blocked() == 1 end), "no waiter in BLPOP")
        core.sleep(700) -- it has waited a while: its validity must not count from its attempt
        assert.is_true(lock:release())
        local out
        assert.is_true(eventually(5000, function()
            out = output(worker)
            return out:find("acquired") ~= nil
        end))
        local t_sent = core.now()
        local pttl = data:command("PTTL", key)
        local t_back = core.now()
        assert.is_true(pttl > 0, "pttl " .. pttl)
        local at, valid = out:match("acquired (%S+) fence %d+ valid (%S+)")
        at, valid = tonumber(at), tonumber(valid)
        -- what the waiter counts on ends before the key does
        assert.is_true(at + valid <= t_back + pttl + 1,
            string.format("counts on %.1f, the key ends by %.1f", at + valid, t_sent + pttl))
        assert.is_true(valid > 2000, "valid " .. valid .. " of 3000")
        local status, log = worker:wait()
        assert.equal(0, status, log)
    end)

    it("waiters get the lock in the order they came, and a newcomer waits behind them", function()
        helper.needs("script_time")
        local key = helper.key()
        local waiters = "{" .. key .. "}:waiters"
        local lock = assert(client:acquire(key, { ttl = 10000 }))
        local workers = {}
        for i = 1, 3 do
            workers[i] = helper.spawn(WORKER, "wait", server:url(), key, 2000, 20000, "notify", 200)
            assert.is_true(eventually(5000, function() return data:command("ZCARD", waiters) == i end))
        end
        assert.is_true(eventually(5000, function() return blocked() == 3 end))
        assert.is_true(lock:release())
        local _, _, code = client:try_acquire(key)
        assert.equal("locked", code)
        local newcomer = assert(client:acquire(key, { wait = 20000 }))
        local came = core.now()
        assert.is_true(newcomer:release())
        local last = 0
        for i = 1, 3 do
            local status, out = workers[i]:wait()
            assert.equal(0, status, out)
            local at = tonumber(out:match("acquired (%S+)"))
            assert.is_true(at > last, "waiter " .. i .. " out of turn")
            last = at
        end
        assert.is_true(came > last, "the newcomer went before a waiter")
    end)

    it("a waiter that died is handed the lock at most once, and costs at most its ttl", function()
        helper.needs("script_time")
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 10000, fair = true }))
        local worker = helper.spawn(WORKER, "wait", server:url(), key, 2000, 20000, "notify", 0, 1500)
        assert.is_true(eventually(5000, function() return blocked() == 1 end), "no waiter in BLPOP")
        local dead = data:command("ZRANGE", "{" .. key .. "}:waiters", 0, 0)[1]
        os.execute("kill -KILL " .. output(worker):match("pid (%d+)"))
        worker:wait()
        assert.is_true(lock:release())
        -- its place in the queue still counted: handed its ttl, once
        assert.equal(dead, data:command("GET", key))
        local pttl = data:command("PTTL", key)
        assert.is_true(pttl > 0 and pttl <= 1500, "held for " .. pttl)
        local t0 = core.now()
        local again = assert(client:acquire(key, { wait = 5000 }))
        assert.is_true(core.now() - t0 < 1500 + 1000, "waited " .. (core.now() - t0))
        assert.is_true(again.fence > lock.fence)
        assert.is_true(again:release())
        -- and not again: the next lock is free at once
        local free = assert(client:try_acquire(key))
        assert.is_true(free:release())
    end)

    it("a waiter that died 2 s before the release is skipped, however long the holder's ttl", function()
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 30000 }))
        local worker = helper.spawn(WORKER, "wait", server:url(), key, 2000, 20000, "notify", 0, 10000)
        assert.is_true(eventually(5000, function() return blocked() == 1 end), "no waiter in BLPOP")
        os.execute("kill -KILL " .. output(worker):match("pid (%d+)"))
        worker:wait()
        core.sleep(2100) -- its last block (1 s at most) and the second's slack
        assert.is_true(lock:release())
        assert.equal(0, data:command("EXISTS", key)) -- deleted, not handed to the dead
        local free = assert(client:try_acquire(key))
        assert.is_true(free:release())
        assert.equal(0, data:command("EXISTS", "{" .. key .. "}:waiters"))
    end)

    -- A lock on key, a waiter's refused attempt in this process (the
    -- request a waiting acquire sends), then the release, which hands the
    -- waiter the lock (fair: whatever its wait). Returns the first lock,
    -- the waiter's token, the server.
    local scripted = require "redlock.scripted"
    local function hand_to_new_waiter(key)
        local s = client.servers[1]
        local lock = assert(client:acquire(key, { ttl = 10000, fair = true }))
        local token = redlock.token()
        assert.is_false((scripted.acquire(s, key, token, 5000, "5000", true)))
        assert.is_true(lock:release())
        return lock, token, s
    end

    it("a waiter that gives up keeps a lock handed to it meanwhile; a left-over hand-off is never taken "
        .. "for a new one", function()
        helper.needs("script_time")
        local key = helper.key()
        local lock, token, s = hand_to_new_waiter(key)
        local handed, fence, since = scripted.give_up(s, key, token)
        assert.equal("handed", handed)
        assert.is_true(fence > lock.fence)
        assert.is_true(since >= 0)
        assert.equal(token, data:command("GET", key))
        data:command("DEL", key)
        -- handed again, then the key goes (as by expiry) and another takes it:
        -- the waiter's next refusal empties its hand-off list
        lock = assert(client:acquire(key, { ttl = 10000, fair = true }))
        assert.is_false((scripted.acquire(s, key, token, 5000, "5000", true)))
        assert.is_true(lock:release())
        local list = "{" .. key .. "}:handoff:" .. token
        assert.equal(1, data:command("LLEN", list))
        data:command("DEL", key)
        lock = assert(client:acquire(key, { ttl = 10000 }))
        assert.is_false((scripted.acquire(s, key, token, 5000, "5000", true)))
        assert.equal(0, data:command("EXISTS", list))
        assert.is_nil(scripted.give_up(s, key, token))
        assert.is_true(lock:release())
        assert.equal(0, data:command("EXISTS", "{" .. key .. "}:waiters"))
    end)

    it("a waiter left by a version before the hand-off (no data) is dropped and the lock still handed over",
        function()
        helper.needs("script_time")
        local key = helper.key()
        local waiters = "{" .. key .. "}:waiters"
        -- (fair: handed however short the waiter's wait; under the bound it would be woken)
        local lock = assert(client:acquire(key, { ttl = 10000, fair = true }))
        data:command("ZADD", waiters, 0, "an-older-waiter")
        local worker = helper.spawn(WORKER, "wait", server:url(), key, 2000, 8000, "notify", 100)
        assert.is_true(eventually(5000, function() return data:command("ZCARD", waiters) == 2 end))
        local mine = data:command("ZRANGE", waiters, 1, 1)[1]
        assert.is_true(lock:release())
        assert.equal(mine, data:command("GET", key))
        assert.equal(core.null, data:command("ZSCORE", waiters, "an-older-waiter"))
        local status, out = worker:wait()
        assert.equal(0, status, out)
    end)

    -- A waiter's refused attempt in this process (token): its place in the
    -- queue; then, until the server's own clock says it has waited longer
    -- than notify.BARGE_MS.
    local function join(key, token)
        assert.is_false((scripted.acquire(client.servers[1], key, token, 5000, "5000", true)))
        return data:command("ZSCORE", "{" .. key .. "}:waiters", token)
    end
    -- Runs fn with notify.BARGE_MS at ms (a string), then puts it back.
    local function with_bound(ms, fn)
        local was = notify.BARGE_MS
        notify.BARGE_MS = ms
        local ok, err = pcall(fn)
        notify.BARGE_MS = was
        assert(ok, err)
    end

    it("fair = false: a release leaves the key to the next acquirer while the front waiter's wait is under "
        .. "the bound, and wakes it; once over the bound, hands it the lock before any newcomer", function()
        helper.needs("script_time")
        local key, token = helper.key(), redlock.token()
        local s = client.servers[1]
        local list = "{" .. key .. "}:handoff:" .. token
        local lock = assert(client:acquire(key, { ttl = 10000 }))
        local since = join(key, token)
        with_bound("600000", function()
            assert.is_true(lock:release())
            -- freed, and the waiter woken on its own list to compete
            assert.equal(0, data:command("EXISTS", key))
            assert.same({ "w", "w" }, data:command("LRANGE", list, 0, -1))
            -- a newcomer takes it; the waiter, refused again, keeps its place
            lock = assert(client:try_acquire(key, { ttl = 10000 }))
            assert.equal(since, join(key, token))
            assert.equal(0, data:command("EXISTS", list))
        end)
        grow_old(key, token)
        assert.is_true(lock:release())
        assert.equal(token, data:command("GET", key))
        local _, _, code = client:try_acquire(key)
        assert.equal("locked", code)
        local handed, fence = scripted.give_up(s, key, token)
        assert.equal("handed", handed)
        assert.is_true(fence > lock.fence)
        data:command("DEL", key)
    end)

    it("fair = true: every release hands the lock to the front waiter, however short its wait", function()
        helper.needs("script_time")
        local key, token = helper.key(), redlock.token()
        with_bound("600000", function()
            local lock = assert(client:acquire(key, { ttl = 10000, fair = true }))
            join(key, token)
            assert.is_true(lock:release())
            assert.equal(token, data:command("GET", key))
            local _, _, code = client:try_acquire(key)
            assert.equal("locked", code)
            assert.equal("handed", (scripted.give_up(client.servers[1], key, token)))
        end)
        data:command("DEL", key)
        -- and a fair client's waiter over the bound too
        local fair = redlock.new { servers = { server:url() }, fair = true }
        token = redlock.token()
        local lock = assert(fair:acquire(key))
        join(key, token)
        grow_old(key, token)
        assert.is_true(lock:release())
        assert.equal(token, data:command("GET", key))
        assert.equal("handed", (scripted.give_up(client.servers[1], key, token)))
        data:command("DEL", key)
        fair:close()
    end)

    it("fair = false: a waiter in another process that the release wakes to compete takes the free key "
        .. "itself (not handed)", function()
        helper.needs("script_time")
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 60000 }))
        -- (its blocks last up to its wait: only a wake-up gets it the lock in time)
        local worker = helper.spawn(WORKER, "wait_long", server:url(), key, 8000)
        assert.is_true(eventually(5000, function() return blocked() == 1 end), "no waiter in BLPOP")
        with_bound("600000", function() assert.is_true(lock:release()) end)
        local status, out = worker:wait()
        assert.equal(0, status, out)
        assert.matches("acquired fence %d+ *\n", out)
    end)

    it("give_up tells a lock whose hand-off element was lost ('held'), so that the waiter releases it",
        function()
        helper.needs("script_time")
        local key = helper.key()
        local _, token, s = hand_to_new_waiter(key)
        data:command("LPOP", "{" .. key .. "}:handoff:" .. token) -- as a BLPOP whose reply was lost
        assert.equal("held", scripted.give_up(s, key, token))
        assert.equal(token, data:command("GET", key))
        data:command("DEL", key)
    end)

    it("several processes with the default options lose no update", function()
        local key, counter = helper.key(), helper.key("counter")
        local workers = {}
        for i = 1, 4 do workers[i] = helper.spawn(WORKER, "count", server:url(), key, counter, 50) end
        for i = 1, 4 do
            local status, out = workers[i]:wait()
            assert.equal(0, status, out)
        end
        assert.equal("200", data:command("GET", counter))
        assert.equal(0, data:command("EXISTS", key))
    end)

    it("a waiter announces itself while it waits; a release with nobody waiting does no wake-up work",
        function()
        local key = helper.key()
        local waiters = "{" .. key .. "}:waiters"
        local lock = assert(client:acquire(key, { ttl = 10000 }))
        assert.is_true(lock:release())
        -- nobody waited: the release only deleted the key
        assert.equal(0, data:command("EXISTS", "{" .. key .. "}:wake"))
        assert.equal(0, data:command("EXISTS", waiters))
        -- try_acquire never waits, so never announces itself
        lock = assert(client:acquire(key, { ttl = 10000 }))
        local other = redlock.new { servers = { server:url() } }
        local _, _, code = other:try_acquire(key)
        assert.equal("locked", code)
        assert.equal(0, data:command("EXISTS", waiters))
        -- a waiter's refused attempt sets the flag for as long as it may wait
        local worker = helper.spawn(WORKER, "wait", server:url(), key, 2000, 8000)
        assert.is_true(eventually(5000, function() return blocked() == 1 end), "no waiter in BLPOP")
        -- (8 s and a second's slack: redlock.notify)
        local pttl = data:command("PTTL", waiters)
        assert.is_true(pttl > 0 and pttl <= 9000, "waiters pttl " .. tostring(pttl))
        assert.equal(1, data:command("ZCARD", waiters))
        assert.is_true(lock:release())
        local status, out = worker:wait()
        assert.equal(0, status, out)
        -- it left the set when it got the lock: the set is gone
        assert.equal(0, data:command("EXISTS", waiters))
        other:close()
    end)

    it("a waiter that gives up leaves the waiters set at once, while a longer waiter stays", function()
        helper.needs("script_time")
        local key = helper.key()
        local waiters = "{" .. key .. "}:waiters"
        local lock = assert(client:acquire(key, { ttl = 10000 }))
        local worker = helper.spawn(WORKER, "wait", server:url(), key, 2000, 8000)
        assert.is_true(eventually(5000, function() return blocked() == 1 end), "no waiter in BLPOP")
        local other = redlock.new { servers = { server:url() } }
        local _, _, code = other:acquire(key, { wait = 300 })
        assert.equal("timeout", code)
        -- the set lives on for the longer waiter (renewed by its attempt
        -- every second); the one that gave up is out
        assert.equal(1, data:command("ZCARD", waiters))
        core.sleep(2500)
        assert.equal(1, data:command("ZCARD", waiters))
        assert.is_true(data:command("PTTL", waiters) > 0)
        assert.is_true(lock:release())
        local status, out = worker:wait()
        assert.equal(0, status, out)
        assert.equal(0, data:command("EXISTS", waiters))
        other:close()
    end)

    it("a waiter that times out sends nothing it cannot finish by its deadline: it joins the queue, "
        .. "blocks, and leaves (no last attempt after the block)", function()
        helper.needs("blpop_ms") -- (a wait under a second is polled there)
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 10000 }))
        local seen = {}
        local c = redlock.new { servers = { server:url() }, on_event = function(ev) seen[#seen + 1] = ev end }
        assert(assert(c:acquire(helper.key())):release()) -- connected, scripts loaded
        -- refused once: its next first attempt is the acquire script, not
        -- SET NX PX (redlock.scripted.grant) followed by the script
        assert.equal("locked", select(3, c:try_acquire(key)))
        local before = evalsha_calls() + set_calls()
        local none, err, code = c:acquire(key, { wait = 300 })
        assert.is_nil(none)
        assert.equal("timeout", code, err)
        -- the refused first attempt, the one that joins the queue, GIVE_UP
        assert.equal(3, evalsha_calls() + set_calls() - before)
        assert.equal("timeout", seen[#seen].type)
        assert.equal(2, seen[#seen].attempts)
        assert.equal(0, data:command("EXISTS", "{" .. key .. "}:waiters"))
        assert.is_true(lock:release())
        c:close()
    end)

    it("an uncontended acquire and release are SET, XADD and one EVALSHA, and no wake-up commands", function()
        helper.needs("evalsha_stats")
        helper.needs("streams")
        local function calls()
            local info, t = data:command("INFO", "commandstats"), {}
            for name, n in info:gmatch("cmdstat_(%w+):calls=(%d+)") do t[name] = tonumber(n) end
            return t
        end
        local key = helper.key()
        assert(assert(client:acquire(key)):release()) -- scripts loaded
        local before = calls()
        for _ = 1, 5 do assert(assert(client:acquire(key)):release()) end
        local after = calls()
        local function delta(name) return (after[name] or 0) - (before[name] or 0) end
        -- SET NX PX and XADD (redlock.scripted.grant); the release script:
        -- GET, EXISTS, DEL
        assert.equal(5, delta("evalsha"))
        assert.equal(5, delta("set"))
        assert.equal(5, delta("xadd"))
        assert.equal(5, delta("exists"))
        assert.equal(5, delta("del"))
        for _, name in ipairs { "rpush", "pexpire", "zadd", "zrem", "eval", "blpop" } do
            assert.equal(0, delta(name), name)
        end
    end)

    it("under sustained contention a release is one round trip, as is the first after it ends", function()
        helper.needs("evalsha_stats")
        local key = helper.key()
        local waiters = "{" .. key .. "}:waiters"
        local function announced() -- what a blocked waiter's refusal leaves
            data:command("ZADD", waiters, 0, "some-waiter")
            data:command("PEXPIRE", waiters, 5000)
        end
        local function releases(lock) -- EVALSHA calls of one release
            local calls = evalsha_calls()
            assert.is_true(lock:release())
            return evalsha_calls() - calls
        end
        announced()
        -- the first release asks whether anybody waits, then wakes them
        assert.equal(2, releases(assert(client:acquire(key))))
        -- the next goes straight to the form that wakes
        announced()
        assert.equal(1, releases(assert(client:acquire(key))))
        -- nobody waits any more: that form finds so, and the one after is
        -- the plain two-key release again
        data:command("DEL", waiters)
        assert.equal(1, releases(assert(client:acquire(key))))
        assert.equal(1, releases(assert(client:acquire(key))))
        announced() -- and a new waiter is found by that plain release
        assert.equal(2, releases(assert(client:acquire(key))))
    end)

    it("the wake-up list shares the key's hash tag and lives one second", function()
        local key = helper.key("{user:1}:job")
        -- a waiter announced (what its refused attempt sets), not blocked now
        data:command("ZADD", key .. ":waiters", 0, "some-waiter")
        local lock = assert(client:acquire(key))
        assert.is_true(lock:release())
        local wake = key .. ":wake"
        assert.equal(1, data:command("LLEN", wake))
        local pttl = data:command("PTTL", wake)
        assert.is_true(pttl > 0 and pttl <= 1000)
        lock = assert(client:acquire(key))
        assert.is_true(lock:release())
        assert.equal(1, data:command("LLEN", wake)) -- never more than one
        assert.is_true(eventually(3000, function() return data:command("EXISTS", wake) == 0 end))
        local plain = helper.key()
        data:command("ZADD", "{" .. plain .. "}:waiters", 0, "some-waiter")
        lock = assert(client:acquire(plain))
        assert.is_true(lock:release())
        assert.equal(1, data:command("LLEN", "{" .. plain .. "}:wake"))
    end)

    it("a left-over wake-up costs one more attempt, never a wrong acquire", function()
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 5000 }))
        assert.is_true(lock:release())
        data:command("SET", key, "foreign", "PX", 5000) -- held again, the wake-up left over
        local t0 = core.now()
        local _, _, code = client:acquire(key, { wait = 300 })
        assert.equal("timeout", code)
        assert.is_true(core.now() - t0 < 3000)
    end)

    it("notify = false polls instead", function()
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 10000 }))
        local worker = helper.spawn(WORKER, "wait", server:url(), key, 20, 8000, "poll")
        local calls = evalsha_calls()
        assert.is_true(eventually(10000, function() return evalsha_calls() > calls + 3 end),
            "no polling seen")
        assert.equal(0, blocked())
        assert.is_true(lock:release())
        local status, out = worker:wait()
        assert.equal(0, status, out)
    end)

    it("a waiter on a server without BLPOP queues as one that is only woken: never handed the lock", function()
        helper.needs("script_time")
        local old = helper.start_server { config = { 'rename-command BLPOP ""' } }
        local c = redlock.new { servers = { old:url() } }
        local d = core.conn(old:spec())
        finally(function()
            c:close()
            d:close()
            old:stop()
        end)
        local key = helper.key()
        local lock = assert(c:acquire(key, { ttl = 10000 }))
        local worker = helper.spawn(WORKER, "wait", old:url(), key, 1000, 8000, "notify")
        local entry
        assert.is_true(eventually(5000, function()
            local token = d:command("ZRANGE", "{" .. key .. "}:waiters", 0, 0)[1]
            entry = token and d:command("HGET", "{" .. key .. "}:waiting", token)
            -- "alive-until ttl fenced": ttl 0 once it knows BLPOP is refused
            return type(entry) == "string" and entry:match("^%d+ (%d+) ") == "0"
        end), "still queued for a hand-off: " .. tostring(entry))
        assert.is_true(lock:release())
        assert.equal(0, d:command("EXISTS", key)) -- deleted, not handed to a poller
        local status, out = worker:wait()
        assert.equal(0, status, out)
    end)

    it("mode script (the version never asked): a BLPOP that takes whole seconds only (before Redis 6.0) is "
        .. "found by its refusal, and the waiter still blocks, a second at a time", function()
        local c = redlock.new { servers = { server:url() }, mode = "script", retry_delay = 100, retry_jitter = 0 }
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 10000 }))
        local attempts
        local none, _, code = c:acquire(key, { wait = 2500, on_event = function(ev) attempts = ev.attempts end })
        assert.is_nil(none)
        assert.equal("timeout", code)
        local s = c.servers[1]
        assert.is_nil(s.no_notify) -- still notified
        assert.equal(helper.server_version().number < 60000, s.blpop_whole == true)
        -- blocking: an attempt a second, then polls in the last second;
        -- polling all along would have made about 25
        assert.is_true(attempts <= 12, "attempts " .. tostring(attempts))
        assert.is_true(lock:release())
        c:close()
    end)

    it("a waiter whose server turns replica while it blocks (UNBLOCKED) is woken, not made to poll for good",
        function()
            helper.needs("unblock_on_demote")
            local other = helper.start_server()
            finally(function() other:stop() end)
            local key = helper.key()
            local lock = assert(client:acquire(key, { ttl = 10000 }))
            -- (retry_delay 2000: a waiter that polls makes an attempt every 2 s)
            local worker = helper.spawn(WORKER, "wait", server:url(), key, 2000, 8000)
            assert.is_true(eventually(5000, function() return blocked() == 1 end), "no waiter in BLPOP")
            -- a replica and a master again in one step (MULTI: before the
            -- waiter's next attempt, no sync, the data stays): the server
            -- answers the blocked waiter "UNBLOCKED ... instance state changed"
            local calls = evalsha_calls()
            assert.equal("OK", data:command("MULTI"))
            data:command("SLAVEOF", "127.0.0.1", other.port)
            data:command("SLAVEOF", "NO", "ONE")
            assert.is_table(data:command("EXEC"))
            assert.is_truthy(data:command("INFO", "replication"):find("role:master", 1, true))
            -- woken: it asks again, is refused by the holder and blocks
            -- again (one that polls from now on never does)
            assert.is_true(eventually(5000, function() return evalsha_calls() > calls and blocked() == 1 end),
                "the waiter polls now")
            assert.is_true(lock:release())
            local status, wout = worker:wait()
            assert.equal(0, status, wout)
            assert.truthy(wout:find("acquired", 1, true), wout)
        end)

    it("notify.wait answers a block that the server ended as it turned replica (UNBLOCKED): woken, at once",
        function()
            helper.needs("unblock_on_demote")
            local other = helper.start_server()
            local c = redlock.new { servers = { server:url() } }
            finally(function()
                c:close()
                other:stop()
            end)
            local s = c.servers[1]
            local key = helper.key()
            assert(c:acquire(key .. ":connect")):release() -- (the waiter's connection is a clone)
            -- a replica and a master again in one step, 0.3 s into a 10 s block
            server:cli_later(300, string.format("MULTI\nSLAVEOF 127.0.0.1 %d\nSLAVEOF NO ONE\nEXEC\n", other.port))
            -- (nil: taken for a refusal, the caller sleeps; true: woken, it
            -- asks again at once)
            assert.is_true(require("redlock.notify").wait(s, key, 10000))
            assert.is_nil(s.no_notify)
            assert.is_truthy(data:command("INFO", "replication"):find("role:master", 1, true))
        end)

    it("an error to BLPOP that is no refusal of it (a wake-up list of another type) polls that wait only",
        function()
            local c = redlock.new { servers = { server:url() }, retry_delay = 50, retry_jitter = 0 }
            finally(function() c:close() end)
            local key = helper.key()
            local lock = assert(client:acquire(key, { ttl = 10000 }))
            local wake = "{" .. key .. "}:wake"
            data:command("SET", wake, "x", "PX", 10000)
            local none, _, code = c:acquire(key, { wait = 1500 })
            assert.is_nil(none)
            assert.equal("timeout", code)
            assert.is_nil(c.servers[1].no_notify) -- the next wait blocks again
            data:command("DEL", wake)
            assert.is_true(lock:release())
        end)

    it("a server without BLPOP falls back to polling", function()
        local old = helper.start_server { config = { 'rename-command BLPOP ""' } }
        local c = redlock.new { servers = { old:url() }, retry_delay = 20, retry_jitter = 0 }
        local key = helper.key()
        -- (over a second: a server whose BLPOP takes whole seconds, before
        -- Redis 6.0, polls shorter waits without trying BLPOP)
        local lock = assert(c:acquire(key, { ttl = 1200 }))
        local t0 = core.now()
        local again = assert(c:acquire(key, { wait = 3000 }))
        assert.is_true(core.now() - t0 < 2000)
        assert.is_true(c.servers[1].no_notify)
        assert.is_true(again:release())
        assert.equal("not owner", select(3, lock:release()))
        c:close()
        old:stop()
    end)
end)
