-- Redis Sentinel: redis+sentinel:// and the table form, discovery as the
-- Sentinel client guidelines say, and a failover followed by the client,
-- its renewal and Redlock members. Real redis-sentinel processes (three,
-- quorum 2) watching a master with a replica, all on loopback.
local helper = require "helper"
local redlock = require "redlock"
local addresses = require "redlock.addresses"

local NAME = "mymaster"

describe("Sentinel URLs and tables", function()
    it("parses redis+sentinel:// with several sentinels, default port, credentials and db", function()
        local s = addresses.parse({ "redis+sentinel://app:pw@10.0.0.1:5000,[::1],h2/locks/3" })[1]
        assert.same({ { host = "10.0.0.1", port = 5000 }, { host = "::1", port = 26379 },
            { host = "h2", port = 26379 } }, s.sentinels)
        assert.equal("locks", s.master_name)
        assert.equal("app", s.username)
        assert.equal("pw", s.password)
        assert.equal(3, s.db)
        assert.is_nil(s.tls)
    end)

    it("takes TLS for the sentinels and the data nodes from rediss+sentinel://", function()
        local s = addresses.parse({ "rediss+sentinel://h1/m" }, { ca_file = "/ca.pem", verify = true })[1]
        assert.equal("/ca.pem", s.tls.ca_file)
        assert.equal("/ca.pem", s.sentinel_tls.ca_file)
    end)

    it("takes the table form with separate credentials for the sentinels", function()
        local s = addresses.parse({ { sentinels = { "a:1", "b" }, master_name = "m", password = "data",
            sentinel_password = "sent", sentinel_tls = { ca_file = "/x" } } })[1]
        assert.same({ { host = "a", port = 1 }, { host = "b", port = 26379 } }, s.sentinels)
        local spec = addresses.sentinel_conn_spec(s)
        assert.equal("sent", spec.sentinels[1].password)
        assert.equal("/x", spec.sentinels[2].tls.ca_file)
        assert.equal("data", spec.password)
        assert.is_nil(spec.sentinel_password)
    end)

    it("refuses bad Sentinel servers with a message that never shows the password", function()
        local function refused(servers)
            local ok, err = pcall(redlock.new, { servers = servers })
            assert.is_false(ok)
            return err
        end
        local err = refused({ "redis+sentinel://user:hunter2@h1,h2" })
        assert.matches("master%-name", err)
        assert.not_matches("hunter2", err)
        assert.matches("redis%+sentinel://%*%*%*@h1,h2", err)
        assert.not_matches("hunter2", refused({ "redis+sentinel://hunter2@h1:99999/m" }))
        assert.matches("master_name", refused({ { sentinels = { "a:1" } } }))
        assert.matches("replace host", refused({ { sentinels = { "a:1" }, master_name = "m", host = "x" } }))
        assert.matches("sentinel #2", refused({ { sentinels = { "a:1", 7 }, master_name = "m" } }))
        assert.matches("1 to 64", refused({ { sentinels = {}, master_name = "m" } }))
        assert.matches("sentinel_check", refused({ { sentinels = { "a" }, master_name = "m", sentinel_check = 0.5 } }))
    end)
end)

describe("Sentinel", function()
    local master, replica, solo2, solo3, sentinels
    local dead_port = 1 -- nothing listens on port 1 of loopback

    local function url(name, list)
        local addrs = {}
        for i, s in ipairs(list or sentinels) do
            addrs[i] = type(s) == "number" and ("127.0.0.1:" .. s) or ("127.0.0.1:" .. s.port)
        end
        return "redis+sentinel://" .. table.concat(addrs, ",") .. "/" .. (name or NAME)
    end

    local function evalsha_calls(server)
        return tonumber(server:cli("INFO", "commandstats"):match("cmdstat_evalsha:calls=(%d+)")) or 0
    end

    -- what sentinel s last saw server report of its role (ROLE in its INFO):
    -- "slave", "master", or nil when s does not list it as a replica
    local function role_reported(s, server)
        local lines = {}
        for l in s:cli("SENTINEL", "REPLICAS", NAME):gmatch("[^\n]+") do lines[#lines + 1] = l end
        local name
        for i = 1, #lines - 1, 2 do
            if lines[i] == "name" then name = lines[i + 1] end
            if lines[i] == "role-reported" and name == "127.0.0.1:" .. server.port then return lines[i + 1] end
        end
    end

    setup(function()
        master = helper.start_server()
        replica = helper.start_replica(master)
        solo2, solo3 = helper.start_server(), helper.start_server()
        local watched = { [NAME] = master, m2 = solo2, m3 = solo3 }
        sentinels = { helper.start_sentinel(watched), helper.start_sentinel(watched),
            helper.start_sentinel(watched) }
        -- each sentinel knows the replica and the other sentinels (a
        -- failover's election and the reconfiguration need them)
        assert(helper.eventually(15000, function()
            for _, s in ipairs(sentinels) do
                local out = s:cli("SENTINEL", "master", NAME)
                if not out:find("num%-other%-sentinels\n2") or not out:find("num%-slaves\n1") then
                    return false
                end
            end
            return true
        end), "the sentinels did not discover each other and the replica")
    end)
    teardown(function() helper.stop_all() end)

    it("takes locks on the master the sentinels name, never on its replica", function()
        local c = redlock.new({ servers = url() })
        local key = helper.key("sentinel")
        local lock = assert(c:acquire(key, { ttl = 5000 }))
        assert.equal(lock.token, master:cli("GET", key))
        assert.is_nil(c:try_acquire(key))
        assert.is_true(lock:extend(5000))
        assert.is_true(lock:release())
        assert.equal("0", master:cli("EXISTS", key))
        assert.equal(0, evalsha_calls(replica))
        assert.matches("sentinel:mymaster", tostring(c))
        c:close()
    end)

    it("asks the next sentinel when one is down, and names the master's address in errors", function()
        local c = redlock.new({ servers = url(nil, { dead_port, sentinels[2], sentinels[3] }) })
        local key = helper.key("sentinel")
        local lock = assert(c:acquire(key))
        assert.is_nil(c:try_acquire(key))
        local held, msg, code = c:try_acquire(key)
        assert.is_nil(held)
        assert.equal("locked", code)
        assert.matches("sentinel:mymaster", msg)
        assert.is_true(lock:release())
        c:close()
    end)

    it("says 'master name unknown' apart from 'no sentinel reachable'", function()
        local c = redlock.new({ servers = url("nosuchmaster"), connect_timeout = 500 })
        local lock, err, code = c:try_acquire(helper.key("sentinel"))
        assert.is_nil(lock)
        assert.equal("connection", code)
        assert.matches("master name unknown", err)
        assert.matches("nosuchmaster", err)
        c:close()

        local gone = redlock.new({ servers = url(nil, { dead_port, 2 }), connect_timeout = 500 })
        lock, err, code = gone:try_acquire(helper.key("sentinel"))
        assert.is_nil(lock)
        assert.equal("connection", code)
        assert.matches("no sentinel reachable", err)
        assert.matches("127.0.0.1:1", err, 1, true)
        assert.matches("127.0.0.1:2", err, 1, true)
        gone:close()
    end)

    it("uses the sentinels' own credentials (sentinel_password), apart from the data nodes'", function()
        helper.needs("sentinel_auth")
        local guarded = helper.start_sentinel({ m2 = solo2 }, { password = "sentinel-secret", quorum = 1 })
        local spec = { sentinels = { "127.0.0.1:" .. guarded.port }, master_name = "m2",
            sentinel_password = "sentinel-secret" }
        local c = redlock.new({ servers = { spec } })
        local key = helper.key("sentinel")
        local lock = assert(c:acquire(key))
        assert.equal(lock.token, solo2:cli("GET", key))
        assert.is_true(lock:release())
        c:close()
        -- without it the sentinel refuses, and the message does not leak it
        spec.sentinel_password = "wrong-secret"
        c = redlock.new({ servers = { spec }, connect_timeout = 500 })
        local none, err, code = c:try_acquire(key)
        assert.is_nil(none)
        assert.equal("connection", code)
        assert.matches("no sentinel reachable", err)
        assert.not_matches("wrong%-secret", err)
        c:close()
        guarded:stop()
    end)

    it("works from the CLI with a redis+sentinel:// URL (status, run)", function()
        local key = helper.key("sentinel-cli")
        local cmd = helper.lua_cmd("bin/redlock", "run", "-s", url(), key, "--", "sh", "-c",
            "echo ran") .. " 2>&1"
        assert.equal("ran", helper.read_cmd(cmd):gsub("%s+$", ""))
        local c = redlock.new({ servers = url() })
        local lock = assert(c:acquire(key))
        local out = helper.read_cmd(helper.lua_cmd("bin/redlock", "status", "-s", url(), key) .. " 2>&1")
        assert.matches("held", out)
        assert.is_true(lock:release())
        c:close()
        -- a password in a sentinel URL is never printed
        out = helper.read_cmd(helper.lua_cmd("bin/redlock", "status", "-s",
            "redis+sentinel://u:hunter2@h1,h2", key) .. " 2>&1")
        assert.matches("redis%+sentinel://%*%*%*@h1,h2", out)
        assert.not_matches("hunter2", out)
    end)

    it("makes a Redlock of Sentinel-managed masters, one voter each", function()
        local c = redlock.new({ servers = { url(NAME), url("m2"), url("m3") } })
        local key = helper.key("sentinel")
        local lock = assert(c:acquire(key, { ttl = 5000 }))
        for _, s in ipairs({ master, solo2, solo3 }) do assert.equal(lock.token, s:cli("GET", key)) end
        assert.is_true(lock:release())
        for _, s in ipairs({ master, solo2, solo3 }) do assert.equal("0", s:cli("EXISTS", key)) end
        c:close()
    end)

    describe("after a failover", function()
        local skip = helper.lua54_only()

        it("follows the new master with new locks, renewal and Redlock, and never writes the old one"
            .. (skip and " (" .. skip .. ")" or ""), function()
            if skip then return end
            -- (WAIT for the acked client; before 5.0 the old master, now a
            -- replica, runs the release scripts replicated to it)
            helper.needs("wait", "script_effects")
            local c = redlock.new({ servers = url(), retry_delay = 10 })
            local quorum = redlock.new({ servers = { url(NAME), url("m2"), url("m3") } })
            -- replica acknowledgement sends the script with WAIT (conn:eval_wait)
            local acked = redlock.new({ servers = url(), replicas = 1, replica_timeout = 2000 })
            assert.is_true((acked:with_lock(helper.key("failover-acked"), function() end)))
            local key, renewed_key = helper.key("failover"), helper.key("failover-renewed")
            assert.is_true((c:with_lock(key, function() end)))
            -- a lock renewed in the background across the switch (the renewal
            -- thread asks the sentinels twice per renewal interval)
            local ttl = helper.ms(3000)
            local held = assert(c:acquire(renewed_key, { ttl = ttl, renew = true }))
            local redlock_held = assert(quorum:acquire(helper.key("failover-quorum"), { ttl = ttl, renew = true }))
            assert(helper.eventually(5000, function()
                return replica:cli("GET", renewed_key) == held.token
            end), "the lock did not reach the replica")

            local new_addr = "127.0.0.1:" .. replica.port
            assert.matches("^OK", sentinels[1]:cli("SENTINEL", "FAILOVER", NAME))
            assert(helper.eventually(20000, function()
                for _, s in ipairs(sentinels) do
                    if s:master_addr(NAME) ~= new_addr then return false end
                end
                return true
            end), "the sentinels did not switch to the replica")

            -- within a few seconds of the switch the client's locks land on
            -- the new master (it asks the sentinels every second: it does not
            -- wait for the old master to refuse writes)
            local before = evalsha_calls(replica)
            assert(helper.eventually(5000, function()
                assert(c:with_lock(key, function() end))
                return evalsha_calls(replica) > before
            end), "new locks did not reach the new master")

            -- once the old master is a replica, nothing more is written there
            assert(helper.eventually(20000, function()
                return master:cli("ROLE"):match("^slave") ~= nil
            end), "the old master was not turned into a replica")
            local old_calls = evalsha_calls(master)
            for _ = 1, 30 do
                local lock = assert(c:acquire(key))
                assert.is_true(lock:release())
            end
            -- (the new master's replica is the old master: WAIT 1 succeeds
            -- once its link is up)
            assert(helper.eventually(20000, function()
                return master:cli("INFO", "replication"):find("master_link_status:up", 1, true) ~= nil
            end), "the old master did not start replicating the new one")
            for _ = 1, 5 do
                local lock = assert(acked:acquire(key))
                assert.is_true(lock.replicas >= 1)
                assert.is_true(lock:release())
            end
            assert.equal(old_calls, evalsha_calls(master))
            acked:close()

            -- the renewal followed: the lock is still held, on the new master
            helper.sleep(ttl + helper.ms(500)) -- more than a ttl: a renewal on the old master alone would lose it
            assert.is_false((held:lost()))
            assert.equal(held.token, replica:cli("GET", renewed_key))
            assert.is_true(held:release())
            assert.equal("0", replica:cli("EXISTS", renewed_key))
            assert.is_false((redlock_held:lost()))
            assert.is_true(redlock_held:release())
            c:close()
            quorum:close()
        end)

        -- (after the test above: the roles may be swapped)
        it("a waiter blocked in BLPOP on the old master moves to the new one when the sentinels announce "
            .. "the switch (+switch-master), not when its wait ends" .. (skip and " (" .. skip .. ")" or ""),
            function()
            if skip then return end
            local old, new = master, replica
            if sentinels[1]:master_addr(NAME) == "127.0.0.1:" .. replica.port then old, new = replica, master end
            assert(helper.eventually(20000, function()
                return new:cli("INFO", "replication"):find("master_link_status:up", 1, true) ~= nil
            end), "the replica is not in sync")
            -- every sentinel has seen it as a replica since the failover above
            -- made it one: a sentinel whose last look (INFO, every 10 s on a
            -- replica) still found it a master would take it, once promoted,
            -- for a stale master and turn it back into a replica of the frozen
            -- old one (+convert-to-slave) before it learns of the switch
            assert(helper.eventually(20000, function()
                for _, s in ipairs(sentinels) do
                    if role_reported(s, new) ~= "slave" then return false end
                end
                return true
            end), "a sentinel still sees the replica as a master")
            local c = redlock.new({ servers = url() })
            -- a client that never asks the sentinels on its own (a check
            -- every hour): it can only learn of the switch from the
            -- announcement; connected to the old master now
            local addrs = {}
            for i, s in ipairs(sentinels) do addrs[i] = "127.0.0.1:" .. s.port end
            local announced = redlock.new({ servers = { { sentinels = addrs, master_name = NAME,
                sentinel_check = 3600000 } } })
            assert(assert(announced:acquire(helper.key("moved"))):release())
            local key = helper.key("moved")
            local held = assert(c:acquire(key, { ttl = 60000 }))
            -- a waiter in another process, whose BLPOP may last 60 s (the
            -- holder's ttl; RECHECK_MS raised), blocked on the old master,
            -- its place in the queue copied to the replica
            local worker = helper.spawn("spec/workers/lock_worker.lua", "wait_long", url(), key, 60000)
            assert(helper.eventually(10000, function()
                return old:cli("CLIENT", "LIST"):find("cmd=blpop", 1, true) ~= nil
                    and new:cli("ZCARD", "{" .. key .. "}:waiters") == "1"
            end), "the waiter did not block")
            -- the old master stops answering (frozen for 20 s) and the
            -- sentinels are told to fail over
            old:freeze()
            old:signal_later(20000, "CONT")
            assert.matches("^OK", sentinels[1]:cli("SENTINEL", "FAILOVER", NAME))
            local new_addr = "127.0.0.1:" .. new.port
            assert(helper.eventually(20000, function()
                for _, s in ipairs(sentinels) do
                    if s:master_addr(NAME) ~= new_addr then return false end
                end
                return true
            end), "the sentinels did not switch")
            -- the first lock after the switch is taken on the new master
            local first = assert(announced:try_acquire(key .. ":first"))
            assert.equal(first.token, new:cli("GET", key .. ":first"))
            assert.is_true(first:release())
            announced:close()
            -- the holder's client follows the switch too: its release, on the
            -- new master, hands the lock to the waiter there
            local errs = {}
            assert(helper.eventually(10000, function()
                local ok, err = held:release()
                errs[#errs + 1] = err
                return ok
            end), "the release failed: " .. table.concat(errs, "; "))
            local status, out = worker:wait(30000)
            local frozen = io.open("/proc/" .. old.pid .. "/stat"):read("*l"):match("^%d+ %b() (%a)") == "T"
            old:thaw()
            assert.equal(0, status, out)
            assert.matches("acquired fence %d+", out)
            -- it had the lock while the old master was still frozen: its
            -- BLPOP there ended at the switch, not at the thaw
            assert.is_true(frozen, "the waiter waited for the old master")
            c:close()
        end)
    end)

    it("gives a connection error naming every sentinel when all are down", function()
        local c = redlock.new({ servers = url(), connect_timeout = 500 })
        for _, s in ipairs(sentinels) do s:stop() end
        local lock, err, code = c:try_acquire(helper.key("sentinel"))
        assert.is_nil(lock)
        assert.equal("connection", code)
        assert.matches("no sentinel reachable", err)
        for _, s in ipairs(sentinels) do assert.matches("127.0.0.1:" .. s.port, err, 1, true) end
        c:close()
    end)
end)

describe("Sentinel over TLS", function()
    local skip = helper.lua54_only()
    it("finds the master through TLS sentinels and locks over TLS (rediss+sentinel://)"
        .. (skip and " (" .. skip .. ")" or ""), function()
        if skip then return end
        helper.needs("tls")
        local certs = helper.tls_certs()
        local master = helper.start_tls_server(certs)
        -- (its tls-port may be taken: another port then, as start_tls_server does)
        local port, sentinel
        for _ = 1, 5 do
            port = helper.pick_port()
            local ok, s = pcall(helper.start_sentinel, { tlsmaster = { port = master.tls_port } }, { quorum = 1,
                config = { "tls-port " .. port, "tls-cert-file " .. certs.server_crt,
                    "tls-key-file " .. certs.server_key, "tls-ca-cert-file " .. certs.ca, "tls-auth-clients no",
                    "tls-replication yes" } })
            if ok then
                sentinel = s
                break
            end
        end
        assert(sentinel, "could not start a TLS sentinel")
        local url = "rediss+sentinel://127.0.0.1:" .. port .. "/tlsmaster"
        local c = redlock.new({ servers = url, tls = { ca_file = certs.ca } })
        local key = helper.key("sentinel-tls")
        local lock = assert(c:acquire(key))
        assert.equal(lock.token, master:cli("GET", key))
        assert.is_true(lock:release())
        c:close()
        -- the sentinels' CA is checked too: a wrong one fails, naming the sentinel
        c = redlock.new({ servers = url, tls = { ca_file = certs.other_ca }, connect_timeout = 500 })
        local none, err, code = c:try_acquire(key)
        assert.is_nil(none)
        assert.equal("connection", code)
        assert.matches("no sentinel reachable", err)
        assert.matches("sentinel 127.0.0.1:" .. port, err, 1, true)
        c:close()
        sentinel:stop()
        master:stop()
    end)
end)

-- Legacy mode's WATCH..MULTI..EXEC over a master that Sentinel demotes in
-- the middle: a write refused with READONLY is not sent on by itself to
-- the new master, where it would run outside the transaction (the other
-- holder's lock deleted). It fails, and the new master keeps what it has.
describe("Sentinel, legacy mode", function()
    local skip = helper.lua54_only()
    it("never sends a transaction's write alone to the new master after a failover"
        .. (skip and " (" .. skip .. ")" or ""), function()
        if skip then return end
        helper.needs("set_px")
        local master = helper.start_server()
        local replica = helper.start_replica(master)
        local sentinel = helper.start_sentinel({ legacy = master }, { quorum = 1 })
        assert(helper.eventually(15000, function()
            return sentinel:cli("SENTINEL", "master", "legacy"):find("num%-slaves\n1") ~= nil
        end), "the sentinel did not discover the replica")
        local c = redlock.new({ servers = "redis+sentinel://127.0.0.1:" .. sentinel.port .. "/legacy",
            mode = "legacy" })
        local key = helper.key("legacy-failover")
        local lock = assert(c:acquire(key, { ttl = 60000 }))
        assert(helper.eventually(5000, function() return replica:cli("EXISTS", key) == "1" end))
        -- the failover comes right after the release's MULTI, and another
        -- holder has the key on the new master by then
        local server = c.servers[1]
        local real = server.conn
        server.conn = setmetatable({}, { __index = function(_, name)
            return function(_, ...)
                local r, err, code, stale = real[name](real, ...)
                if (name == "command" or name == "command_kept") and (...) == "MULTI" then
                    -- (NOGOODSLAVE until the sentinel has looked at the replica)
                    assert(helper.eventually(20000, function()
                        return sentinel:cli("SENTINEL", "FAILOVER", "legacy"):match("^OK") ~= nil
                    end), "the sentinel refused the failover")
                    assert(helper.eventually(20000, function()
                        return master:cli("ROLE"):match("^slave") ~= nil
                            and sentinel:master_addr("legacy") == "127.0.0.1:" .. replica.port
                    end), "the failover did not happen")
                    replica:cli("SET", key, "other-holder")
                end
                return r, err, code, stale
            end
        end })
        local ok, err, code = lock:release()
        server.conn = real
        -- (the write goes nowhere: the connection of the WATCH is gone)
        assert.is_nil(ok)
        assert.equal("connection", code, err)
        assert.equal("other-holder", replica:cli("GET", key))
        c:close()
        sentinel:stop()
        replica:stop()
        master:stop()
    end)
end)

describe("Sentinel, the renewal thread", function()
    local skip = helper.lua54_only()
    it("follows a failover the sentinel announces (+switch-master), also when no sentinel answers its check"
        .. (skip and " (" .. skip .. ")" or ""), function()
        if skip then return end
        local master = helper.start_server()
        local replica = helper.start_replica(master)
        local sentinel = helper.start_sentinel({ renewed = master }, { quorum = 1 })
        local c
        -- (busted keeps one finally per test)
        finally(function()
            if c then c:close() end
            master:thaw()
            sentinel:stop()
            replica:stop()
            master:stop()
        end)
        assert(helper.eventually(15000, function()
            return sentinel:cli("SENTINEL", "master", "renewed"):find("num%-slaves\n1") ~= nil
        end), "the sentinel did not discover the replica")
        c = redlock.new({ servers = "redis+sentinel://127.0.0.1:" .. sentinel.port .. "/renewed" })
        local key = helper.key("renewed")
        local held = assert(c:acquire(key, { ttl = helper.ms(3000), renew = true }))
        -- the thread has renewed it once: it is connected, and subscribed
        assert(helper.eventually(helper.ms(5000), function() return c:stats().renewed >= 1 end), "no renewal")
        assert(helper.eventually(5000, function() return replica:cli("GET", key) == held.token end),
            "the lock did not reach the replica")
        -- the old master stops answering, the sentinel promotes the replica
        -- and announces it, and then goes away: the thread's check before a
        -- round finds no sentinel, and its extends time out on the old master
        master:freeze()
        assert(helper.eventually(20000, function()
            return sentinel:cli("SENTINEL", "FAILOVER", "renewed"):match("^OK") ~= nil
        end), "the sentinel refused the failover")
        -- (the master's own address, which changes at +switch-master:
        -- get-master-addr-by-name names the promoted replica before that)
        assert(helper.eventually(20000, function()
            return sentinel:cli("SENTINEL", "master", "renewed"):find("\nport\n" .. replica.port .. "\n", 1, true)
                ~= nil
        end), "the sentinel did not switch")
        sentinel:stop()
        local before = c:stats().renewed
        -- renewed on the new master, from the announcement alone
        assert(helper.eventually(helper.ms(10000), function() return c:stats().renewed > before end),
            "the renewal did not follow the announced master")
        assert.is_false((held:lost()))
        assert.equal(held.token, replica:cli("GET", key))
        assert.is_true(held:release())
        assert.equal("0", replica:cli("EXISTS", key))
    end)
end)
