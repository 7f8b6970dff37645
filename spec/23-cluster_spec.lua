-- Redis Cluster: redis+cluster:// and the table form, locks routed by slot,
-- every script's keys in one slot (no CROSSSLOT, whatever the key), MOVED
-- and ASK followed through a resharding under load, a master's failover,
-- and bad seed lists. A real 3-master, 3-replica Cluster on loopback
-- (redis-cli --cluster create).
local helper = require "helper"
local redlock = require "redlock"
local addresses = require "redlock.addresses"
local util = require "redlock.util"
local core = require "redlock.core"

describe("Cluster URLs and tables", function()
    it("parses redis+cluster:// seed lists, credentials and TLS", function()
        local s = addresses.parse({ "rediss+cluster://app:pw@10.0.0.1:7000,10.0.0.2,[::1]:7002" })[1]
        assert.same({ { host = "10.0.0.1", port = 7000 }, { host = "10.0.0.2", port = 6379 },
            { host = "::1", port = 7002 } }, s.cluster)
        assert.equal("app", s.username)
        assert.equal("pw", s.password)
        assert.is_true(s.tls.verify)
        s = addresses.parse({ { cluster = { "a:1", "b" }, password = "x" } })[1]
        assert.same({ { host = "a", port = 1 }, { host = "b", port = 6379 } }, s.cluster)
    end)

    it("refuses bad Cluster servers without showing the password", function()
        local function refused(opts)
            local ok, err = pcall(redlock.new, opts)
            assert.is_false(ok)
            return err
        end
        local err = refused({ servers = { "redis+cluster://u:hunter2@h1:7000,h2/3" } })
        assert.matches("no database number", err)
        assert.not_matches("hunter2", err)
        assert.matches("1 to 64", refused({ servers = { { cluster = {} } } }))
        assert.matches("replaces host", refused({ servers = { { cluster = { "a" }, host = "b" } } }))
        assert.matches("database 0 only", refused({ servers = { { cluster = { "a" }, db = 2 } } }))
        assert.matches("node #2", refused({ servers = { { cluster = { "a", "b:0" } } } }))
        assert.matches("legacy", refused({ servers = { "redis+cluster://a" }, mode = "legacy" }))
    end)

    it("keeps fence counters per slot on a Cluster, in the lock key's slot", function()
        for _, key in ipairs({ "a", "order:17", "{user:1}cart", "x}y", "{}z", "\0\255" }) do
            local counter = util.fence_counter(key, true)
            assert.equal(core.keyslot(key), core.keyslot(counter))
            assert.matches("}redlock:fences$", counter)
        end
        assert.equal("redlock:fences", util.fence_counter("a"))
    end)
end)

describe("Cluster", function()
    local skip = helper.lua54_only()
    if skip then
        it("(" .. skip .. ")", function() end)
        return
    end

    local cluster, client
    setup(function()
        cluster = helper.start_cluster(3, 1)
        client = redlock.new({ servers = cluster.url, retry_delay = 5 })
    end)
    teardown(function()
        if client then client:close() end
        helper.stop_all()
    end)

    -- Keys that land on each of the three masters, with and without tags.
    local function spread_keys()
        local keys, owners = {}, {}
        local candidates = { "a", "b", "c", "order:17", "{user:1}cart", "{user:2}cart", "x}y", "{}z",
            "job:nightly" }
        for _, key in ipairs(candidates) do
            local node = helper.cluster_owner(cluster, key)
            owners[node] = true
            keys[#keys + 1] = key
        end
        local n = 0
        for _ in pairs(owners) do n = n + 1 end
        return keys, n
    end

    it("takes a seed named twice as one node (URL and table alike)", function()
        local seed = cluster.seeds[1]
        for _, servers in ipairs({ "redis+cluster://" .. seed .. "," .. seed,
            { { cluster = { seed, seed } } } }) do
            local c = redlock.new({ servers = servers })
            local lock = assert(c:acquire(helper.key("twice")))
            assert.is_true(lock:release())
            c:close()
        end
    end)

    it("takes locks on keys of every master, with and without hash tags, and leaves only fence counters", function()
        local keys, masters = spread_keys()
        assert.equal(3, masters)
        local fences = {}
        for _, key in ipairs(keys) do
            local lock = assert(client:acquire(key, { ttl = 5000 }))
            local node = helper.cluster_owner(cluster, key)
            assert.equal(lock.token, node:cli("GET", key))
            assert.is_nil(client:try_acquire(key))
            assert.is_true(lock:extend(5000))
            assert.is_true(lock:release())
            assert.is_true(lock.fence > (fences[key] or 0))
            fences[key] = lock.fence
            assert.is_true((client:with_lock(key, function() end)))
        end
        -- nothing left but the per-slot fence counters
        for _, node in ipairs(cluster.nodes) do
            if node:cli("ROLE"):match("^master") then
                for k in node:cli("KEYS", "*"):gmatch("[^\n]+") do
                    assert.matches("}redlock:fences$", k)
                end
            end
        end
    end)

    it("renews and wakes waiters on every shard (renewal thread, notified waiting)", function()
        local keys = { "a", "b", "c" }
        local held = {}
        for i, key in ipairs(keys) do held[i] = assert(client:acquire(key, { ttl = helper.ms(1200), renew = true })) end
        helper.sleep(helper.ms(2000))
        for i, key in ipairs(keys) do
            assert.is_false((held[i]:lost()))
            assert.equal(held[i].token, helper.cluster_owner(cluster, key):cli("GET", key))
        end
        -- a waiter in another process is woken by each release
        for i, key in ipairs(keys) do
            local w = helper.spawn("spec/workers/lock_worker.lua", "wait", cluster.url, key, "1000", "8000",
                "notify")
            helper.sleep(300)
            assert.is_true(held[i]:release())
            local status, out = w:wait(10000)
            assert.equal(0, status, out)
            assert.matches("acquired", out)
        end
    end)

    it("works from the CLI with a redis+cluster:// URL (run, status)", function()
        local key = "{user:9}cli"
        local out = helper.read_cmd(helper.lua_cmd("bin/redlock", "run", "-s", cluster.url, key, "--",
            "sh", "-c", "echo ran") .. " 2>&1")
        assert.equal("ran", (out:gsub("%s+$", "")))
        local lock = assert(client:acquire(key))
        out = helper.read_cmd(helper.lua_cmd("bin/redlock", "status", "-s", cluster.url, key) .. " 2>&1")
        assert.matches("held", out)
        assert.matches(tostring(lock.fence), out, 1, true)
        assert.is_true(lock:release())
    end)

    it("close() does not wait for a renewal blocked on a frozen node", function()
        local key = "{frozen}renewed"
        local node = helper.cluster_owner(cluster, key)
        local c = redlock.new({ servers = cluster.url, timeout = 60000 })
        assert(c:acquire(key, { ttl = 1500, renew = true }))
        -- frozen for 1.8 s (less than cluster-node-timeout: no failover);
        -- the renewal's next round (every 500 ms) then waits on it
        node:freeze()
        node:signal_later(1800, "CONT")
        helper.sleep(700)
        c:close()
        -- close() shut the thread's socket down: it returned while the
        -- node was still frozen (it would have waited for the thaw)
        local f = io.open("/proc/" .. node.pid .. "/stat")
        local state = f:read("*l"):match("^%d+ %b() (%a)")
        f:close()
        assert.equal("T", state)
        assert(helper.eventually(5000, function() return node:cli("PING") == "PONG" end))
        helper.sleep(1500) -- the lock expires; nothing left
    end)

    it("a Cluster counts as one voter of a Redlock quorum", function()
        local a, b = helper.start_server(), helper.start_server()
        local q = redlock.new({ servers = { cluster.url, a:url(), b:url() }, server_timeout = 1000 })
        local key = helper.key("cluster-quorum")
        local lock = assert(q:acquire(key))
        assert.equal(lock.token, helper.cluster_owner(cluster, key):cli("GET", key))
        assert.equal(lock.token, a:cli("GET", key))
        assert.is_true(lock:release())
        q:close()
        a:stop()
        b:stop()
    end)

    it("loses no update while the slot is resharded under four processes (MOVED, ASK, TRYAGAIN)", function()
        local lock_key, counter_key = "{hot}lock", "{hot}counter"
        local from, slot = helper.cluster_owner(cluster, lock_key)
        local to
        for _, node in ipairs(cluster.nodes) do
            if node ~= from and node:cli("ROLE"):match("^master") then to = node end
        end
        local workers = {}
        for i = 1, 4 do
            workers[i] = helper.spawn("spec/workers/cluster_counter.lua", cluster.url, lock_key, counter_key,
                "5000")
        end
        -- there and back, as redis-cli --cluster reshard does (new keys
        -- land on the target through ASK while the keys move)
        local function reshard(src, dst) helper.move_slot(cluster, slot, src, dst, 100) end
        helper.sleep(800)
        reshard(from, to)
        helper.sleep(1000)
        reshard(to, from)
        helper.sleep(1000)
        reshard(from, to)
        local total = 0
        for i = 1, 4 do
            local status, out = workers[i]:wait(30000)
            assert.equal(0, status, out)
            total = total + tonumber(out:match("done (%d+)"))
        end
        assert.is_true(total > 0)
        assert.equal(to, (helper.cluster_owner(cluster, lock_key)))
        assert.equal(tostring(total), to:cli("GET", counter_key))
        assert.equal("0", to:cli("EXISTS", lock_key))
    end)

    it("follows a master's failover: new locks work, a lock its replica had is kept", function()
        local key = "{fo}held"
        local master = helper.cluster_owner(cluster, key)
        local held = assert(client:acquire(key, { ttl = 60000 }))
        -- a Redlock with the Cluster as one voter, its map loaded before
        local a, b = helper.start_server(), helper.start_server()
        local quorum = redlock.new({ servers = { cluster.url, a:url(), b:url() }, server_timeout = 1000 })
        assert.is_true((quorum:with_lock("{fo}quorum", function() end)))
        local replica
        assert(helper.eventually(5000, function()
            for _, node in ipairs(cluster.nodes) do
                if node:cli("ROLE"):match("^slave") then
                    -- a replica answers reads on a connection that asked READONLY
                    local conn = core.conn({ host = "127.0.0.1", port = node.port })
                    conn:command("READONLY")
                    local v = conn:command("GET", key)
                    conn:close()
                    if v == held.token then
                        replica = node
                        return true
                    end
                end
            end
            return false
        end), "the lock did not reach a replica")
        master:kill()
        assert(helper.eventually(30000, function()
            return replica:cli("ROLE"):match("^master") ~= nil
        end), "the replica was not promoted")
        -- the client follows within a bounded time: new locks in that slot work
        assert(helper.eventually(15000, function()
            local lock = client:try_acquire("{fo}new")
            return lock and lock:release()
        end), "no lock could be taken after the failover")
        -- the replica had the lock: it is still held, and ours to release
        assert.is_nil(client:try_acquire(key))
        assert.is_true(held:release())
        assert.equal("0", replica:cli("EXISTS", key))
        -- the fan-out reloads the map too: the Cluster votes again, from the new master
        assert(helper.eventually(10000, function()
            local lock = quorum:try_acquire("{fo}quorum")
            local ok = lock and replica:cli("GET", "{fo}quorum") == lock.token
            if lock then lock:release() end
            return ok
        end), "the Redlock's Cluster voter did not follow the failover")
        quorum:close()
        a:stop()
        b:stop()
    end)

    it("gives clear errors for a bad seed list", function()
        local none = redlock.new({ servers = "redis+cluster://127.0.0.1:1,127.0.0.1:2", connect_timeout = 300 })
        local lock, err, code = none:try_acquire("k")
        assert.is_nil(lock)
        assert.equal("connection", code)
        assert.matches("no cluster node reachable", err)
        assert.matches("127.0.0.1:2", err, 1, true)
        none:close()
        local plain = helper.start_server()
        local wrong = redlock.new({ servers = "redis+cluster://127.0.0.1:" .. plain.port })
        lock, err, code = wrong:try_acquire("k")
        assert.is_nil(lock)
        assert.equal("server", code)
        assert.matches("not a cluster node", err)
        wrong:close()
        plain:stop()
    end)
end)

-- Every node with TLS only (no plaintext port; the cluster bus and
-- replication over TLS too): the map names the TLS ports, every node
-- gets a handshake, MOVED leads to a node over TLS, the renewal thread
-- renews there. Inside nginx: spec/42-openresty_topologies_spec.lua.
describe("Cluster over TLS", function()
    local skip = helper.lua54_only()
    if skip then
        it("(" .. skip .. ")", function() end)
        return
    end
    local it_tls = helper.needing(it, "tls", "cluster")

    teardown(function() helper.stop_all() end)

    it_tls("locks on every master over rediss+cluster://, follows MOVED, renews from the C thread", function()
        local certs = helper.tls_certs()
        local cluster = helper.start_cluster(3, 0, { tls = certs })
        local client = redlock.new({ servers = cluster.url, tls = { ca_file = certs.ca }, retry_delay = 5 })
        local keys = {}
        for i, node in ipairs(cluster.nodes) do
            local key
            repeat key = helper.key("tls" .. i) until helper.cluster_owner(cluster, key) == node
            -- (a ttl that outlasts the redis-cli calls below on a busy machine)
            local lock = assert(client:acquire(key, { ttl = 60000 }))
            assert.equal(lock.token, node:cli("GET", key))
            keys[i] = { key = key, lock = lock, node = node }
        end
        -- the first key's slot moves to the second master (MIGRATE over
        -- TLS): its extend meets MOVED, and extends it there
        local first, to = keys[1], cluster.nodes[2]
        local _, slot = helper.cluster_owner(cluster, first.key)
        helper.move_slot(cluster, slot, first.node, to)
        assert.is_true(first.lock:extend(120000))
        assert.is_true(tonumber(to:cli("PTTL", first.key)) > 60000)
        for _, k in ipairs(keys) do assert.is_true(k.lock:release()) end
        -- three ttls of work: only the renewal thread (TLS in C) kept it
        local key = keys[3].key
        local ok, inner = client:with_lock(key, { ttl = 1000 }, function(lock)
            helper.sleep(3000)
            return not lock:lost() and select(3, client:try_acquire(key))
        end)
        assert.is_true(ok)
        assert.equal("locked", inner)
        assert.equal("0", keys[3].node:cli("EXISTS", key))
        client:close()
    end)
end)
