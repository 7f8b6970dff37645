-- Network partitions (issue 38): servers in network namespaces of their
-- own (spec/netns.lua), links cut and healed. A cut link drops packets
-- silently, unlike a frozen server (whose kernel still completes TCP
-- handshakes) or a killed one (which refuses at once). Each case ends in
-- bounded time with an error naming the server, never two holders at once
-- (counted by the resource: a record the holders write while the library
-- says the lock is theirs, spec/workers/holder.lua), nothing held forever.
-- Needs root (CAP_NET_ADMIN) for `ip netns`; Lua 5.4's suite only.
local helper = require "helper"
local netns = require "netns"
local redlock = require "redlock"
local core = require "redlock.core"

local skip = helper.lua54_only() or netns.missing()

local function esc(s) return (s:gsub("%p", "%%%0")) end
local function name_of(server) return server.host .. ":" .. server.port end

local function recorder()
    local seen = {}
    return function(ev) seen[#seen + 1] = ev end, seen
end

-- A holder's record (spec/workers/holder.lua's log).
local function read_log(path)
    local rec = { valid = 0 }
    local f = io.open(path)
    if not f then return rec end
    for line in f:lines() do
        local word, rest = line:match("^(%S+)%s*(.*)$")
        if word == "got" then
            local fence, t = rest:match("^(%S+) (%S+)$")
            rec.fence, rec.got = tonumber(fence), tonumber(t)
        elseif word == "valid" then
            rec.valid = rec.valid + 1
            rec.last_valid = tonumber(rest)
        elseif word == "end" or word == "failed" then
            rec[word] = rest
        end
    end
    f:close()
    return rec
end

-- Never two holders: b got the lock only after a's last moment of validity.
local function one_after_other(a, b)
    assert.is_not_nil(a.got, "the first holder never got the lock")
    assert.is_not_nil(b.got, "the second holder never got the lock: " .. tostring(b.failed))
    assert.is_true(a.valid > 0)
    assert.is_true(a.last_valid < b.got, string.format("two holders at once: the first still held it at %.3f,"
        .. " the second got it at %.3f", a.last_valid, b.got))
    assert.is_true(b.fence > a.fence)
end

-- Waits until the holder logging to path got the lock (or gave up).
local function holding(path)
    helper.eventually(15000, function()
        local rec = read_log(path)
        return rec.got or rec.failed
    end)
    local rec = read_log(path)
    assert(rec.got, "the first holder got no lock: " .. tostring(rec.failed))
end

local function wait_worker(w)
    local status, out = w:wait(60000)
    assert.equal(0, status, out)
end

describe("partitions", function()
    if skip then
        pending("skipped: " .. skip)
        return
    end
    local net
    before_each(function() net = netns.new() end)
    after_each(function()
        helper.stop_all()
        net:destroy()
    end)

    describe("one server cut off from the client", function()
        it("in the middle of an acquire: 'connection' naming it, before the wait; the holder's key expires",
            function()
                net:space("s")
                local server = net:server("s")
                local holder = redlock.new { servers = { server:url() } }
                local waiter = redlock.new { servers = { server:url() }, connect_timeout = 300, timeout = 300 }
                local key = helper.key("cut-acquire")
                local held = assert(holder:acquire(key, { ttl = 1500 }))
                helper.later(300, net:cut_cmd("client", "s"))
                local t0 = core.now()
                -- (ttl: a claim the waiter sent into the cut reaches the
                -- server once the link heals, TCP retransmitting it, and
                -- holds the key that long with a token the waiter gave up)
                local lock, err, code = waiter:acquire(key, { wait = 10000, ttl = 1500 })
                local took = core.now() - t0
                assert.is_nil(lock)
                assert.equal("connection", code)
                assert.matches("^connection: " .. esc(name_of(server)), err)
                assert.is_true(took < 10000, "took " .. took)
                -- (the server is looked at from inside its namespace)
                assert.is_true(helper.eventually(2000, function() return server:cli("EXISTS", key) == "0" end))
                net:heal("client", "s")
                local _, _, rcode = held:release()
                assert.equal("not owner", rcode)
                assert(assert(waiter:acquire(key)):release())
                holder:close()
                waiter:close()
            end)

        it("in the middle of a hold with renewal: the holder's validity ends before a holder on the far side"
            .. " gets the lock", function()
            net:space("s")
            local server = net:server("s")
            local key = helper.key("cut-hold")
            local log_a, log_b = helper.fresh_dir("holder") .. "/a", helper.fresh_dir("holder") .. "/b"
            local a = helper.spawn("spec/workers/holder.lua", server:url(), key, 1000, 10000, 4000, log_a)
            holding(log_a)
            helper.sleep(500) -- (renewed at least once)
            net:cut("client", "s")
            -- b runs beside the server, on the far side of the partition
            local b = net:spawn("s", "spec/workers/holder.lua", server:url(), key, 1000, 15000, 300, log_b)
            wait_worker(a)
            wait_worker(b)
            local ra, rb = read_log(log_a), read_log(log_b)
            one_after_other(ra, rb)
            assert.is_not.matches("^true", ra["end"])
            assert.matches("^true", rb["end"])
            assert.equal("0", server:cli("EXISTS", key))
        end)

        it("in the middle of a release: 'connection' naming it within the timeout; the key expires by its ttl",
            function()
                net:space("s")
                local server = net:server("s")
                local client = redlock.new { servers = { server:url() }, connect_timeout = 300, timeout = 300 }
                local key = helper.key("cut-release")
                local lock = assert(client:acquire(key, { ttl = 1500 }))
                net:cut("client", "s")
                local ok, err, code = lock:release()
                assert.is_nil(ok)
                assert.equal("connection", code)
                assert.matches("^connection: " .. esc(name_of(server)) .. ".*timed out", err)
                assert.equal("1", server:cli("EXISTS", key))
                assert.is_true(helper.eventually(2000, function() return server:cli("EXISTS", key) == "0" end))
                net:heal("client", "s")
                assert(assert(client:acquire(key)):release())
                client:close()
            end)

        it("in the middle of a release, its reply lost: 'connection', though the key is gone; a second"
            .. " release says 'not owner'", function()
            net:space("s")
            local server = net:server("s")
            local client = redlock.new { servers = { server:url() }, connect_timeout = 300, timeout = 1000 }
            local key = helper.key("cut-reply")
            -- (the release script known to the server: EVALSHA runs it)
            assert(assert(client:acquire(helper.key())):release())
            local lock = assert(client:acquire(key, { ttl = 30000 }))
            -- the release reaches the server (frozen), the link is cut, the
            -- server runs it and answers into the partition
            server:freeze()
            helper.later(200, net:cut_cmd("client", "s"))
            helper.later(400, "kill -CONT " .. server.pid)
            local ok, err, code = lock:release()
            assert.is_nil(ok)
            assert.equal("connection", code)
            assert.matches("^connection: " .. esc(name_of(server)) .. ".*timed out", err)
            assert.is_true(helper.eventually(2000, function() return server:cli("EXISTS", key) == "0" end))
            net:heal("client", "s")
            local _
            _, _, code = lock:release()
            assert.equal("not owner", code)
            client:close()
        end)
    end)

    describe("Redlock over three servers", function()
        it("a minority cut off: locks go on, the server named; then a majority: 'no quorum' naming them",
            function()
                local servers, urls = {}, {}
                for i = 1, 3 do
                    net:space("r" .. i)
                    servers[i] = net:server("r" .. i)
                    urls[i] = servers[i]:url()
                end
                local hook, seen = recorder()
                local a = redlock.new { servers = urls }
                local b = redlock.new { servers = urls, on_event = hook, server_backoff = 0 }
                local key = helper.key("redlock-cut")
                local held = assert(a:acquire(key, { ttl = 3000 }))
                net:cut("client", "r1")
                local _, _, code = b:try_acquire(key)
                assert.equal("locked", code)
                local other = assert(b:acquire(helper.key()))
                assert.is_true(other:release())
                local named = false
                for _, ev in ipairs(seen) do
                    if ev.type == "server_error" and ev.server == name_of(servers[1]) then named = true end
                end
                assert.is_true(named, "no server_error event named the server cut off")
                net:cut("client", "r2")
                local t0 = core.now()
                local lock, err
                lock, err, code = b:acquire(helper.key(), { wait = 3000 })
                assert.is_true(core.now() - t0 < 3000 + 1000)
                assert.is_nil(lock)
                assert.equal("no quorum", code)
                assert.matches(esc(name_of(servers[1])) .. ": timed out", err)
                assert.matches(esc(name_of(servers[2])) .. ": timed out", err)
                -- the holder cannot extend without a majority; nobody holds it after its ttl
                local ok
                ok, _, code = held:extend()
                assert.is_nil(ok)
                assert.equal("no quorum", code)
                for i = 1, 3 do
                    assert.is_true(helper.eventually(4000, function() return servers[i]:cli("EXISTS", key) == "0" end))
                end
                net:heal("client", "r1")
                net:heal("client", "r2")
                local again = assert(b:acquire(key, { wait = 3000 }))
                assert.is_true(again.fence > held.fence)
                assert.is_true(again:release())
                a:close()
                b:close()
            end)

        it("a majority cut off from a renewing holder: its validity ends before a holder on the far side gets it",
            function()
                local servers, urls = {}, {}
                for i = 1, 3 do
                    net:space("r" .. i)
                    servers[i] = net:server("r" .. i)
                    urls[i] = servers[i]:url()
                end
                -- the far side: a namespace that reaches all three servers
                net:space("far", { client = false })
                for i = 1, 3 do net:link("r" .. i, "far") end
                local key = helper.key("redlock-hold")
                local list = table.concat(urls, ",")
                local log_a, log_b = helper.fresh_dir("holder") .. "/a", helper.fresh_dir("holder") .. "/b"
                local a = helper.spawn("spec/workers/holder.lua", list, key, 1000, 10000, 4000, log_a)
                holding(log_a)
                helper.sleep(500)
                net:cut("client", "r1")
                net:cut("client", "r2")
                local b = net:spawn("far", "spec/workers/holder.lua", list, key, 1000, 15000, 300, log_b)
                wait_worker(a)
                wait_worker(b)
                local ra, rb = read_log(log_a), read_log(log_b)
                one_after_other(ra, rb)
                assert.is_not.matches("^true", ra["end"])
                assert.matches("^true", rb["end"])
                -- the copy the holder kept on the server it still reached expires
                assert.is_true(helper.eventually(2000, function() return servers[3]:cli("EXISTS", key) == "0" end))
            end)
    end)

    describe("a Sentinel group", function()
        it("master cut off from the sentinels, not from the client (split brain): the client's locks move to"
            .. " the new master within sentinel_check of the switch", function()
            -- the master alone in "m"; its replica and three sentinels in
            -- "s"; the client reaches both; the link m-s is what is cut
            net:space("m")
            net:space("s")
            net:link("s", "m")
            local master = net:server("m")
            local s = net.spaces.s
            local replica = helper.start_replica(master, { host = s.addr, exec = s.exec,
                config = netns.open_config() })
            local sentinels, addrs = {}, {}
            for i = 1, 3 do
                sentinels[i] = helper.start_sentinel({ locks = master }, { host = s.addr, exec = s.exec,
                    config = { "protected-mode no" } })
                addrs[i] = s.addr .. ":" .. sentinels[i].port
            end
            assert(helper.eventually(15000, function()
                for _, sentinel in ipairs(sentinels) do
                    local out = sentinel:cli("SENTINEL", "master", "locks")
                    if not out:find("num%-other%-sentinels\n2") or not out:find("num%-slaves\n1") then
                        return false
                    end
                end
                return true
            end), "the sentinels did not discover each other and the replica")
            local check = 1000 -- sentinel_check's default, what docs/topologies.md gives as the bound
            local group = { sentinels = addrs, master_name = "locks", sentinel_check = check }
            local client = redlock.new { servers = { group }, connect_timeout = 300, timeout = 300 }
            local key = helper.key("split")
            local held = assert(client:acquire(key, { ttl = 60000 }))
            assert(helper.eventually(5000, function() return replica:cli("GET", key) == held.token end))

            net:cut("s", "m")
            -- the client goes on taking locks (fresh keys); each is found on
            -- the old master or the new one
            local new_addr = name_of(replica)
            local switched, last_old, first_new
            local deadline = core.now() + 30000
            local n = 0
            while core.now() < deadline and not (first_new and core.now() > first_new + 2 * check) do
                n = n + 1
                local k = helper.key("split-" .. n)
                local lock = client:acquire(k, { ttl = 60000 })
                local t = core.now()
                if not switched and sentinels[1]:master_addr("locks") == new_addr then switched = t end
                if lock then
                    if master:cli("GET", k) == lock.token then last_old = t end
                    if replica:cli("GET", k) == lock.token and not first_new then first_new = t end
                end
                core.sleep(50)
            end
            assert.is_not_nil(switched, "the sentinels did not fail over")
            assert.is_not_nil(first_new, "no lock reached the new master")
            assert.is_true(last_old < first_new, "a lock went to the old master after one reached the new")
            -- the bound: the sentinels' answer changed at `switched` (seen
            -- by this loop, at most one round later); the client asks them
            -- every sentinel_check ms
            assert.is_true(last_old - switched < check + 500, string.format(
                "the client wrote the old master %.0f ms after the switch", last_old - switched))
            -- the lock taken before the cut was replicated: nobody else gets it
            local other = redlock.new { servers = { group } }
            local _, _, code = other:try_acquire(key)
            assert.equal("locked", code)
            assert.is_true(held:release())
            client:close()
            other:close()
        end)
    end)

    describe("a Cluster", function()
        it("a master cut off from everyone: errors name that node, then its replica takes over with the locks"
            .. " it had", function()
            -- the victim alone in "v", the five other nodes in "rest"
            net:space("v")
            net:space("rest")
            net:link("rest", "v")
            local function node(space)
                local addr = net.spaces[space].addr
                return net:server(space, { config = { "cluster-enabled yes", "cluster-config-file nodes.conf",
                    "cluster-node-timeout 2000", "cluster-require-full-coverage no",
                    "cluster-announce-ip " .. addr } })
            end
            local nodes = { node("v") }
            for i = 2, 6 do nodes[i] = node("rest") end
            local addrs = {}
            for i, n in ipairs(nodes) do addrs[i] = name_of(n) end
            -- the victim first: redis-cli makes it a master (one per host first)
            local out = helper.read_cmd("env -u LD_PRELOAD redis-cli --cluster create " .. table.concat(addrs, " ")
                .. " --cluster-replicas 1 --cluster-yes 2>&1")
            assert(out:find("All 16384 slots covered", 1, true), out)
            local cluster = { nodes = nodes }
            assert(helper.eventually(20000, function()
                for _, n in ipairs(nodes) do
                    if not n:cli("CLUSTER", "INFO"):find("cluster_state:ok", 1, true) then return false end
                end
                return true
            end), "the cluster did not reach cluster_state:ok")
            local victim = nodes[1]
            assert.matches("^master", victim:cli("ROLE"))
            -- a key the victim serves
            local key
            for i = 1, 1000 do
                local k = helper.key("cluster-cut-" .. i)
                if helper.cluster_owner(cluster, k) == victim then
                    key = k
                    break
                end
            end
            assert(key, "no key of the victim's slots")
            local url = "redis+cluster://" .. addrs[2] .. "," .. addrs[3] .. "," .. addrs[1]
            local a = redlock.new { servers = { url }, connect_timeout = 300, timeout = 300 }
            local b = redlock.new { servers = { url }, connect_timeout = 300, timeout = 300 }
            -- the victim's replica (the one node that can be promoted for its slots)
            local replica
            assert(helper.eventually(20000, function()
                local host, port = victim:cli("INFO", "replication")
                    :match("slave0:ip=([^,]+),port=(%d+),state=online")
                for _, n in ipairs(nodes) do
                    if n.host == host and tostring(n.port) == port then replica = n end
                end
                return replica ~= nil
            end), "the victim's replica did not sync")
            local held = assert(a:acquire(key, { ttl = 30000 }))
            -- the lock is seen on the replica itself before the cut: a WAIT
            -- sent from another connection waits for none of a's writes,
            -- and a replica just synced (diskless) is "online" before the
            -- master streams writes to it (after the replica's first ACK);
            -- a lock cut off before it reached the replica is lost in the
            -- failover (replication is asynchronous: docs/topologies.md)
            assert(helper.eventually(10000, function() return replica:cli("KEYS", key) == key end),
                "the lock did not reach the victim's replica")

            net:cut("client", "v")
            net:cut("rest", "v")
            local t0 = core.now()
            local errors, got, refused = 0, nil, nil
            while core.now() - t0 < 30000 do
                local lock, err, code = b:try_acquire(key)
                if lock then
                    got = lock
                    break
                end
                if code == "locked" then
                    refused = true
                    break
                end
                errors = errors + 1
                assert.is_true(code == "connection" or code == "server", err)
                if code == "connection" then assert.matches(esc(name_of(victim)), err) end
                core.sleep(100)
            end
            assert.is_nil(got, "a second holder: the promoted replica did not have the lock")
            assert.is_true(refused, "the replica was not promoted")
            assert.is_true(errors > 0)
            -- the holder, whose lock the new master kept, extends and releases it there
            assert.is_true(held:extend())
            assert.is_true(held:release())
            local again = assert(b:try_acquire(key))
            assert.is_true(again.fence > held.fence)
            assert.is_true(again:release())
            a:close()
            b:close()
        end)
    end)
end)
