-- Group locks (a list of keys): all or nothing, no deadlock whatever the
-- order, no lost update per key between real processes, on one server and
-- on a Cluster with keys in three slots; a group and a single lock of one
-- of its keys exclude each other.
local helper = require "helper"
local core = require "redlock.core"

-- Runs 4 group_pairs workers (n cycles each) on url over keys; checks every
-- key's counter against the times the workers took it.
local function pairs_run(url, data, keys, n)
    local workers = {}
    for i = 1, 4 do
        workers[i] = helper.spawn("spec/workers/group_pairs.lua", url, n, 1000 + i, (table.unpack or unpack)(keys))
    end
    local times = {}
    for i = 1, 4 do
        local status, out = workers[i]:wait(180000)
        assert.equal(0, status, out)
        assert.matches("done " .. n, out)
        for k, t in out:gmatch("\n(%S+) (%d+)") do times[k] = (times[k] or 0) + tonumber(t) end
    end
    local total = 0
    for _, k in ipairs(keys) do
        assert.equal(tostring(times[k] or 0), tostring(data:command("GET", k .. ":counter")):gsub("userdata.*", "0"))
        total = total + (times[k] or 0)
        assert.equal(0, data:command("EXISTS", k))
    end
    assert.equal(4 * n * 2, total)
end

describe("group locks", function()
    -- (the kinds\' scripts read the server\'s clock: Redis 3.2+)
    local it = helper.needing(it, "script_time")
    local server, client, data
    setup(function() server, client, data = helper.single_server() end)
    teardown(function() helper.close_all(client, data) end)

    it("4 processes x 60 random pairs of 4 keys in random orders: no deadlock, no lost update", function()
        local keys = {}
        for i = 1, 4 do keys[i] = helper.key("g" .. i) end
        pairs_run(server:url(), data, keys, 60)
    end)

    it("all or nothing: a held key refuses the group and leaves the others free", function()
        local a, b, c = helper.key("a"), helper.key("b"), helper.key("c")
        local single = assert(client:acquire(b))
        local _, err, code = client:try_acquire({ a, b, c })
        assert.equal("locked", code, err)
        assert.equal(0, data:command("EXISTS", a))
        assert.equal(0, data:command("EXISTS", c))
        _, _, code = client:acquire({ c, b, a }, { wait = 100 })
        assert.equal("timeout", code)
        assert.equal(0, data:command("EXISTS", a))
        assert(single:release())
        local g = assert(client:acquire({ c, b, a }))
        assert.same({ c, b, a }, g.keys)
        for _, k in ipairs({ a, b, c }) do assert.equal(g.token, data:command("GET", k)) end
        -- a single lock of one of its keys is refused while the group holds
        _, _, code = client:try_acquire(a)
        assert.equal("locked", code)
        -- and the plain layout: another client's SET NX fails
        assert.equal(core.null, data:command("SET", c, "x", "NX"))
        assert.is_true(g:extend(20000))
        assert.is_true(data:command("PTTL", a) > 10000)
        assert.is_true(g:release())
        for _, k in ipairs({ a, b, c }) do assert.equal(0, data:command("EXISTS", k)) end
        local _, rerr, rcode = g:release()
        assert.equal("not owner", rcode, rerr)
    end)

    it("a group's release hands a key to its single-lock waiter", function()
        local a, b = helper.key("a"), helper.key("b")
        local g = assert(client:acquire({ a, b }))
        local w = helper.spawn("spec/workers/hold_permit.lua", server:url(), a, 0, 5000, 10000)
        assert(helper.eventually(10000, function() return data:command("ZCARD", "{" .. a .. "}:waiters") == 1 end))
        assert.is_true(g:release())
        local status, out = w:wait(20000)
        assert.equal(0, status, out)
        assert.matches("^held", out)
        assert.equal(0, data:command("EXISTS", b))
        data:command("DEL", a)
    end)

    it("a waiting group is woken by the release of the key that refused it, and leaves its queue", function()
        local a, b = helper.key("a"), helper.key("b")
        local single = assert(client:acquire(b, { ttl = 60000 }))
        -- a group whose polling would sleep 10 s, longer than its wait
        local w = helper.spawn("spec/workers/hold_group.lua", server:url(), 8000, a, b)
        assert(helper.eventually(10000, function()
            return data:command("ZCARD", "{" .. b .. "}:waiters") == 1
        end), "the group waits in the queue of " .. b)
        assert.equal(0, data:command("EXISTS", a))
        assert.is_true(single:release())
        local status, out = w:wait(20000)
        assert.equal(0, status, out)
        assert.matches("^held", out)
        -- it left the queue when it got the keys
        assert.equal(0, data:command("EXISTS", "{" .. b .. "}:waiters"))
        data:command("DEL", a, b)
    end)

    it("a waiting group with replicas = 1 is woken too (not polled), and leaves its queue", function()
        local replica = helper.start_replica(server)
        local a, b = helper.key("a"), helper.key("b")
        local single = assert(client:acquire(b, { ttl = 60000 }))
        -- (polling would sleep 10 s, longer than its wait: only a wake-up gets it)
        local w = helper.spawn_in("env HOLD_GROUP_REPLICAS=1 ", "spec/workers/hold_group.lua", server:url(), 8000,
            a, b)
        assert(helper.eventually(10000, function()
            return data:command("ZCARD", "{" .. b .. "}:waiters") == 1
        end), "the group waits in the queue of " .. b)
        -- blocked on the key's wake-up list, not sleeping between polls
        assert(helper.eventually(10000, function()
            return data:command("CLIENT", "LIST"):find("cmd=blpop", 1, true) ~= nil
        end), "the group does not block on the wake-up list")
        assert.is_true(single:release())
        local status, out = w:wait(20000)
        assert.equal(0, status, out)
        assert.matches("^held", out)
        assert.equal(0, data:command("EXISTS", "{" .. b .. "}:waiters"))
        data:command("DEL", a, b)
        replica:stop()
    end)

    it("a waiter that gives up at the front wakes the readers queued behind it", function()
        local notify = require "redlock.notify"
        local k = helper.key("rw")
        local r1 = assert(client:acquire(k, { shared = true, ttl = 60000 }))
        -- a writer, then a reader, queued (the scripts' waiting path, without blocking)
        local wtoken, rtoken = core.token(), core.token()
        local ok = client.strategy.acquire(client, k, wtoken, 60000, "5000", true)
        assert.is_false(ok)
        ok = require("redlock.shared").strategy.acquire(client, k, rtoken, 60000, "5000", true)
        assert.is_false(ok)
        assert.equal(2, data:command("ZCARD", notify.waiters_key(k)))
        assert.equal(0, data:command("EXISTS", notify.wake_key(k)))
        -- the writer gives up: the reader behind it is woken at once
        require("redlock.scripted").give_up(client.servers[1], k, wtoken)
        assert.equal(1, data:command("EXISTS", notify.wake_key(k)))
        assert.equal(1, data:command("ZCARD", notify.waiters_key(k)))
        require("redlock.scripted").give_up(client.servers[1], k, rtoken)
        assert(r1:release())
        data:command("DEL", notify.wake_key(k))
    end)

    it("a group found lost stops renewing its other keys", function()
        local a, b = helper.key("a"), helper.key("b")
        local g = assert(client:acquire({ a, b }, { ttl = helper.ms(300), renew = true }))
        data:command("DEL", b)
        assert(helper.eventually(5000, function() return g:lost() end))
        -- (a's renewal stopped: its key expires with its last ttl)
        assert(helper.eventually(5000, function() return data:command("EXISTS", a) == 0 end),
            "the group's other key is still renewed")
        g:release()
    end)

    it("renews every key in the background; a key taken away is reported lost", function()
        local a, b = helper.key("a"), helper.key("b")
        local ok, lost = client:with_lock({ a, b }, { ttl = helper.ms(300) }, function(g)
            core.sleep(helper.ms(1000))
            return g:lost()
        end)
        assert.is_true(ok)
        assert.is_false(lost)
        local g = assert(client:acquire({ a, b }, { ttl = helper.ms(300), renew = true }))
        data:command("DEL", b)
        assert(helper.eventually(5000, function() return g:lost() end))
        local _, err, code = g:release()
        assert.equal("not owner", code, err)
        assert.equal(0, data:command("EXISTS", a))
    end)

    it("fences per key from the single lock's counter, strictly increasing across kinds", function()
        local k, j = helper.key("k"), helper.key("j")
        local seen = {}
        local function add(f) seen[#seen + 1] = f end
        local l = assert(client:acquire(k)); add(l.fence); assert(l:release())
        local p = assert(client:acquire(k, { limit = 2 })); add(p.fence); assert(p:release())
        local g = assert(client:acquire({ j, k })); add(g.fences[k]); assert(g:release())
        l = assert(client:acquire(k)); add(l.fence); assert(l:release())
        g = assert(client:acquire({ k, j })); add(g.fences[k]); assert(g:release())
        p = assert(client:acquire(k, { limit = 1 })); add(p.fence); assert(p:release())
        for i = 2, #seen do assert.is_true(seen[i] > seen[i - 1], "fence " .. i) end
        g = assert(client:acquire({ j, k }, { fence = false }))
        assert.is_nil(g.fences)
        assert(g:release())
    end)

    it("refuses a repeated key and an empty list", function()
        assert.has_error(function() client:acquire({ "a", "b", "a" }) end,
            "bad argument #1 to 'acquire' (key #3 repeats key #1, 'a')")
        assert.has_error(function() client:try_acquire({}) end)
        assert.has_error(function() client:with_lock({ "a", 2 }, function() end) end)
    end)

    it("groups that expire unreleased leave nothing behind", function()
        local before = data:command("DBSIZE")
        assert(client:acquire({ helper.key("a"), helper.key("b"), helper.key("c") }, { ttl = 150 }))
        assert(helper.eventually(5000, function() return data:command("DBSIZE") <= before end))
        assert.equal(before, data:command("DBSIZE"))
    end)
end)

describe("group locks over Redlock (3 servers)", function()
    -- (the kinds' scripts read the server's clock: Redis 3.2+)
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

    it("takes every key on a majority, per-key fences; a single lock of a key is refused", function()
        local a, b = helper.key("a"), helper.key("b")
        local g = assert(client:acquire({ a, b }))
        for i = 1, 3 do assert.equal(g.token, servers[i]:cli("GET", b)) end
        assert.truthy(g.fences[a] and g.fences[b] and g.fences[b] > g.fences[a])
        local _, _, code = client:try_acquire(a)
        assert.equal("locked", code)
        assert.is_true(g:extend(20000))
        assert.is_true(tonumber(servers[2]:cli("PTTL", a)) > 10000)
        assert.is_true(g:release())
        for i = 1, 3 do assert.equal("0", servers[i]:cli("EXISTS", a)) end
        local l = assert(client:acquire(b))
        assert.is_true(l.fence > g.fences[b])
        _, _, code = client:try_acquire({ a, b })
        assert.equal("locked", code)
        for i = 1, 3 do assert.equal("0", servers[i]:cli("EXISTS", a)) end
        assert(l:release())
        local ok, lost = client:with_lock({ a, b }, { ttl = helper.ms(300) }, function(lock)
            require("redlock.core").sleep(helper.ms(900))
            return lock:lost()
        end)
        assert.is_true(ok)
        assert.is_false(lost)
    end)

    -- Issue 48's rule over Redlock: a free key is kept for a single lock's
    -- waiter that came the bound or more before the caller; a group is a
    -- newcomer to each key's queue, with its own arrival once a majority
    -- refused it (its score, see redlock.quorum), and takes no place.
    describe("and single locks' waiters", function()
        local notify = require "redlock.notify"
        local quorum = require "redlock.quorum"
        local group = require "redlock.group"
        local redlock = require "redlock"
        local data = {}
        setup(function()
            for i = 1, 3 do data[i] = core.conn(servers[i]:spec()) end
        end)
        teardown(function()
            for i = 1, 3 do data[i]:close() end
        end)
        -- a single lock's waiter's refused attempt: in every server's queue
        local function queue(key, token)
            assert.is_false((quorum.acquire(client, key, token, 10000, "5000", nil, false, nil, nil,
                notify.BARGE_MS)))
        end
        -- until every server's clock is the bound past token's place
        local function grow_old(key, token)
            for i = 1, 3 do
                local since = tonumber(data[i]:command("ZSCORE", notify.waiters_key(key), token))
                assert.is_true(helper.server_clock_past(data[i], tonumber(notify.BARGE_MS) * 1000, since))
            end
        end

        it("a group is refused a free key that a waiter past the bound queues for", function()
            local a, b, w = helper.key("a"), helper.key("b"), redlock.token()
            local lock = assert(client:acquire(a))
            queue(a, w)
            grow_old(a, w)
            assert.is_true(lock:release())
            local _, _, code = client:try_acquire({ b, a })
            assert.equal("locked", code)
            for i = 1, 3 do assert.equal(0, data[i]:command("EXISTS", a, b)) end
            assert.is_nil(quorum.give_up(client, a, w))
        end)

        it("a group that came before a waiter is not kept out by it", function()
            local a, b, w, g = helper.key("a"), helper.key("b"), redlock.token(), redlock.token()
            local lock = assert(client:acquire(a))
            local place = {}
            assert.is_false((group.quorum.acquire(client, { a, b }, g, 10000, nil, nil, false, nil, nil,
                notify.BARGE_MS, place)))
            assert.truthy(place.score)
            queue(a, w)
            grow_old(a, w)
            assert.is_true(lock:release())
            place.prev, g = g, redlock.token()
            local ok, fences = group.quorum.acquire(client, { a, b }, g, 10000, nil, nil, false, nil, nil,
                notify.BARGE_MS, place)
            assert.is_true(ok, tostring(fences))
            assert.is_true((group.quorum.release(client, { a, b }, g)))
            assert.is_nil(quorum.give_up(client, a, w))
        end)

        it("a group's release wakes the waiter of a key it held", function()
            local a, b, w = helper.key("a"), helper.key("b"), redlock.token()
            local g = assert(client:acquire({ a, b }))
            queue(a, w)
            assert.is_true(g:release())
            for i = 1, 3 do
                assert.equal(0, data[i]:command("EXISTS", a, b))
                -- (nudged on its own list: parts/hand.lua)
                assert.equal(2, data[i]:command("LLEN", notify.handoff_key(a, w)))
            end
            assert.is_nil(quorum.give_up(client, a, w))
        end)
    end)

    it("4 processes x 25 random pairs of 4 keys: no deadlock, no lost update", function()
        local keys = {}
        for i = 1, 4 do keys[i] = helper.key("g" .. i) end
        local data = core.conn(servers[1]:spec())
        pairs_run(table.concat(urls, ";"), data, keys, 25)
        data:close()
    end)

    it("one server down: the groups still get a majority", function()
        local a, b = helper.key("a"), helper.key("b")
        servers[3]:stop()
        local g = assert(client:acquire({ b, a }))
        assert.is_true(g:release())
    end)
end)

describe("group locks on a Cluster", function()
    -- (the kinds\' scripts read the server\'s clock: Redis 3.2+)
    local it = helper.needing(it, "script_time", "cluster")
    local cluster
    setup(function()
        helper.lua54_only()
        if helper.lacks("cluster") then return end -- (each test skips, saying why)
        cluster = helper.start_cluster(3, 0)
    end)
    teardown(function() helper.stop_all() end)

    it("4 processes x 40 random pairs of 4 keys in three slots: no deadlock, no lost update", function()
        local keys = { helper.key("{a}x"), helper.key("{a}y"), helper.key("{b}z"), helper.key("{c}w") }
        local slots = {}
        for _, k in ipairs(keys) do slots[core.keyslot(k)] = true end
        local n = 0
        for _ in pairs(slots) do n = n + 1 end
        assert.equal(3, n)
        local conns = {}
        local data = {}
        function data.command(_, cmd, k, ...)
            local node = helper.cluster_owner(cluster, k)
            conns[node] = conns[node] or core.conn(node:spec())
            return conns[node]:command(cmd, k, ...)
        end
        pairs_run(cluster.url, data, keys, 40)
        for _, c in pairs(conns) do c:close() end
    end)

    it("semaphores and readers on a Cluster: permits, the writer's wait, the hand-off", function()
        local redlock = require "redlock"
        local client = redlock.new { servers = { cluster.url }, retry_delay = 5 }
        local key = helper.key("sem")
        local p1 = assert(client:acquire(key, { limit = 2 }))
        local p2 = assert(client:acquire(key, { limit = 2 }))
        local _, _, code = client:try_acquire(key, { limit = 2 })
        assert.equal("locked", code)
        assert(p1:release() and p2:release())
        local rw = helper.key("rw")
        local r1 = assert(client:acquire(rw, { shared = true }))
        local r2 = assert(client:acquire(rw, { shared = true }))
        assert.is_true(r2.fence > r1.fence)
        _, _, code = client:try_acquire(rw)
        assert.equal("locked", code)
        assert(r1:release() and r2:release())
        local w = assert(client:acquire(rw))
        assert(w:release())
        client:close()
    end)

    it("rolls back the slots already taken when a later slot is held", function()
        local redlock = require "redlock"
        local client = redlock.new { servers = { cluster.url }, retry_delay = 5 }
        local a, b = helper.key("{a}p"), helper.key("{c}q")
        local first = core.keyslot(a) < core.keyslot(b) and a or b
        local later = first == a and b or a
        local single = assert(client:acquire(later))
        local _, _, code = client:try_acquire({ later, first })
        assert.equal("locked", code)
        -- the first slot's key was taken and given back
        local probe = assert(client:try_acquire(first))
        assert(probe:release())
        assert(single:release())
        local g = assert(client:acquire({ a, b }))
        assert.truthy(g.fences[a] and g.fences[b])
        assert.is_true(g:extend())
        assert.is_true(g:release())
        client:close()
        -- a Redlock with a Cluster member: one script per server cannot
        -- take keys of several slots there
        local s2, s3 = helper.start_server(), helper.start_server()
        local rl = redlock.new { servers = { cluster.url, s2:url(), s3:url() } }
        local ok, err = pcall(rl.acquire, rl, { a, b })
        assert.is_false(ok)
        assert.matches("Cluster member is not supported", err, 1, true)
        rl:close()
    end)
end)

describe("a waiting group on any server with scripting (Redis 2.6.12+)", function()
    local client, data
    setup(function() local _; _, client, data = helper.single_server({ retry_delay = 200, retry_jitter = 0 }) end)
    teardown(function() helper.close_all(client, data) end)

    -- (before Redis 3.2 no TIME in a writing script: it queued nowhere and
    -- tried again at once, thousands of scripts a second)
    it("waits in the key's queue, or polls at retry_delay: it never spins", function()
        local a, b = helper.key("a"), helper.key("b")
        local single = assert(client:acquire(b, { ttl = 60000 }))
        local calls = function()
            local info, n = data:command("INFO", "commandstats"), 0
            for c in info:gmatch("cmdstat_eval%a*:calls=(%d+)") do n = n + tonumber(c) end
            return n
        end
        local before = calls()
        local g, _, code = client:acquire({ a, b }, { wait = 1000 })
        assert.is_nil(g)
        assert.equal("timeout", code)
        local n = calls() - before
        assert.is_true(n < 60, n .. " scripts in one waiting group's second")
        assert.equal(0, data:command("EXISTS", a))
        assert(single:release())
    end)
end)
