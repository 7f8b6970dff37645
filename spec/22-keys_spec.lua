-- What the library leaves in the user's Redis (issue 22): once its locks
-- are released or expired and its waiters gone, nothing per lock name, in
-- script, legacy and Redlock modes; one fence counter per server. Fences
-- strictly increase across holders, across a restart that lost the counter
-- too; fence = false touches no counter. Companion keys share the lock
-- key's Cluster slot, braces in the key or not.
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"
local notify = require "redlock.notify"

local NAMES = 2000
local LIBRARY_KEYS = 4 -- at most this many library-wide keys per plain server
local NO_SCRIPTING = {
    'rename-command EVAL ""', 'rename-command EVALSHA ""', 'rename-command SCRIPT ""',
    'rename-command FUNCTION ""', 'rename-command FCALL ""',
}
local COUNTER = "redlock:fences"

-- Keys with no ttl, but for the fence counter.
-- (KEYS before 2.8, which has no SCAN: a test server holds few keys)
local function immortal(data)
    local out, cursor = {}, "0"
    repeat
        local r
        if helper.lacks("scan") then
            r = { "0", data:command("KEYS", "*") }
        else
            r = data:command("SCAN", cursor, "COUNT", 1000)
        end
        cursor = r[1]
        for _, k in ipairs(r[2]) do
            if k ~= COUNTER and helper.pttl(data, k) == -1 then out[#out + 1] = k end
        end
    until cursor == "0"
    return out
end

describe("keys the library leaves, and fences", function()
    local plain, legacy_server, datas, urls
    setup(function()
        plain = { helper.start_server(), helper.start_server(), helper.start_server() }
        legacy_server = helper.start_server { config = NO_SCRIPTING }
        datas, urls = {}, {}
        for i, s in ipairs(plain) do
            datas[i], urls[i] = core.conn(s:spec()), s:url()
        end
    end)
    teardown(function()
        for _, d in ipairs(datas) do d:close() end
        helper.stop_all()
    end)

    -- NAMES names, half through with_lock, half acquire/release (looking
    -- for keys without a ttl while some are held); then every server's
    -- DBSIZE is what it was plus at most LIBRARY_KEYS
    local function churn(client, conns)
        local before = {}
        for i, d in ipairs(conns) do before[i] = d:command("DBSIZE") end
        local prefix = helper.key("name") .. ":"
        for i = 1, NAMES do
            local name = prefix .. i
            if i % 2 == 0 then
                assert(client:with_lock(name, function() return true end))
            else
                local lock = assert(client:acquire(name))
                if i % 500 == 1 then
                    for _, d in ipairs(conns) do assert.same({}, immortal(d)) end
                end
                assert.is_true(lock:release())
            end
        end
        for i, d in ipairs(conns) do
            local grown = d:command("DBSIZE") - before[i]
            assert.is_true(grown <= LIBRARY_KEYS, grown .. " keys more on server " .. i)
        end
    end

    it("script mode: 2000 names leave nothing per name", function()
        churn(redlock.new { servers = { urls[1] } }, { datas[1] })
    end)

    it("legacy mode: 2000 names leave nothing per name", function()
        local d = core.conn(legacy_server:spec())
        finally(function() d:close() end)
        churn(redlock.new { servers = { legacy_server:url() }, mode = "legacy" }, { d })
    end)

    it("Redlock over 3 servers: 2000 names leave nothing per name on any", function()
        -- (server_timeout: 6000 round trips, none of which may miss the
        -- default 50 ms on a busy machine)
        churn(redlock.new { servers = urls, server_timeout = 1000 }, datas)
    end)

    it("locks that expire unreleased, and waiters that gave up, leave nothing after the ttl", function()
        local d = datas[1]
        local before = d:command("DBSIZE")
        local client = redlock.new { servers = { urls[1] } }
        local prefix = helper.key("gone") .. ":"
        for i = 1, 50 do assert(client:acquire(prefix .. i, { ttl = 300 })) end
        -- a waiter that gives up: it joined the waiters set
        local none, _, code = client:acquire(prefix .. 1, { wait = 20 })
        assert.is_nil(none)
        assert.equal("timeout", code)
        assert.is_true(d:command("DBSIZE") > before)
        helper.sleep(500)
        assert.is_true(d:command("DBSIZE") - before <= LIBRARY_KEYS)
    end)

    it("four processes contending on 20 names, some giving up: nothing left after the longest ttl", function()
        local d = datas[2]
        local before = d:command("DBSIZE")
        local prefix = helper.key("contend") .. ":"
        local workers = {}
        for i = 1, 4 do workers[i] = helper.spawn("spec/workers/names.lua", urls[2], prefix, 60) end
        local gave_up = 0
        for i = 1, 4 do
            local status, out = workers[i]:wait(60000)
            assert.equal(0, status, out)
            gave_up = gave_up + tonumber(out:match("ok %d+ (%d+)"))
        end
        -- the ttl (2 s) bounds every key: locks, waiters queues and their
        -- data (a block, at most 1 s, and a second's slack), wake-up lists
        -- (1 s), hand-off lists (a lock's ttl)
        helper.sleep(2100)
        assert.is_true(d:command("DBSIZE") - before <= LIBRARY_KEYS)
        assert.is_true(gave_up >= 0)
    end)

    it("fences increase across names and across a restart that lost the counter (script and legacy)", function()
        helper.needs("script_time")
        local s = helper.start_server()
        local ls = helper.start_server { config = NO_SCRIPTING }
        for _, case in ipairs { { s, "script" }, { ls, "legacy" } } do
            local server, mode = case[1], case[2]
            local client = redlock.new { servers = { server:url() }, mode = mode }
            local last = 0
            for i = 1, 30 do
                local lock = assert(client:acquire(helper.key() .. i))
                assert.is_true(lock.fence > last, mode)
                last = lock.fence
                assert.is_true(lock:release())
            end
            client:close()
            server:restart() -- no persistence: the counter is gone
            local d = core.conn(server:spec())
            assert.equal(0, d:command("EXISTS", COUNTER))
            d:close()
            client = redlock.new { servers = { server:url() }, mode = mode }
            local lock = assert(client:acquire(helper.key()))
            assert.is_true(lock.fence > last, mode .. ": " .. lock.fence .. " after " .. last)
            assert.is_true(lock:release())
            client:close()
        end
    end)

    -- The uncontended acquire takes SET NX PX and the fence's XADD without a
    -- script (redlock.scripted.grant): every grant's fence is raised to the
    -- server's clock by the server (scripts/parts/fence.lua), the scripts' grants
    -- too. Fences strictly increase per key across clients when the
    -- counter is lost under live connections, with a restart, and when the
    -- server behind a connection changes to one that missed grants; the
    -- one exception, a counter lost within the millisecond of a grant
    -- (docs/fencing.md), is stepped over with a 2 ms pause.
    describe("the fence counter", function()
        local function calls(d, name)
            local info = d:command("INFO", "commandstats")
            local n = tonumber(info:match("cmdstat_" .. name .. ":calls=(%d+)") or "0")
            -- (2.6 and 2.8 count EVALSHA as eval)
            if name == "evalsha" then n = n + tonumber(info:match("cmdstat_eval:calls=(%d+)") or "0") end
            return n
        end
        -- Before Redis 3.2 a script cannot read TIME and write: the fence is
        -- the counter alone, which starts again at 1 when lost (docs/fencing.md)
        local streams = not helper.lacks("streams")
        -- clients take the lock on one key in turn; each fence must be above
        -- every fence given before on that key, by any of them
        local function taker(clients, key)
            local last, by = 0, "none"
            -- opts: the acquire's; only: the one client to take it (else all)
            return function(opts, only)
                -- (no goto: Lua 5.1 runs this file too)
                for i, c in ipairs(clients) do
                    if not only or i == only then
                        local lock = assert(c:acquire(key, opts))
                        if lock.fence then
                            assert.is_true(lock.fence > last, string.format("client %d got %.0f after %s's %.0f",
                                i, lock.fence, by, last))
                            last, by = lock.fence, "client " .. i
                        end
                        assert.is_true(lock:release())
                    end
                end
                return last
            end
        end

        it("the acquire sends SET NX PX and XADD, and one script (the release)", function()
            helper.needs("set_px", "evalsha_stats")
            local s = helper.start_server()
            local d = core.conn(s:spec())
            local client = redlock.new { servers = { s:url() } }
            assert(client:acquire(helper.key())):release()
            local evalsha, set, xadd = calls(d, "evalsha"), calls(d, "set"), calls(d, "xadd")
            local last = 0
            for _ = 1, 10 do
                local lock = assert(client:acquire(helper.key()))
                assert.is_true(lock.fence > last)
                last = lock.fence
                assert.is_true(lock:release())
            end
            if streams then
                assert.equal(10, calls(d, "evalsha") - evalsha)
                assert.equal(10, calls(d, "set") - set)
                assert.equal(10, calls(d, "xadd") - xadd)
                assert.equal(0, calls(d, "incr"))
                assert.equal("stream", d:command("TYPE", COUNTER))
                -- trimmed by whole nodes (MAXLEN ~ 1): bounded by the
                -- server's stream-node-max-entries (100 here), whatever
                -- the number of grants
                assert.is_true(d:command("XLEN", COUNTER) <= 100)
                for _ = 1, 250 do assert(client:acquire(helper.key())):release() end
                assert.is_true(d:command("XLEN", COUNTER) <= 100)
                assert.equal(260, calls(d, "xadd") - xadd)
            else
                -- no streams: the first grant's XADD was refused, the
                -- acquire script takes every fence since (INCR, TIME)
                assert.equal(20, calls(d, "evalsha") - evalsha)
                assert.equal("string", d:command("TYPE", COUNTER))
            end
            -- fence = false: SET NX PX alone
            xadd = calls(d, "xadd")
            local lock = assert(client:acquire(helper.key(), { fence = false }))
            assert.is_nil(lock.fence)
            assert.is_true(lock:release())
            assert.equal(xadd, calls(d, "xadd"))
            -- held: locked, with the holder's pttl
            local key = helper.key()
            local held = assert(client:acquire(key, { ttl = 60000 }))
            for _ = 1, 2 do
                local _, err, code = client:try_acquire(key)
                assert.equal("locked", code)
                assert.matches("expires in %d+ ms", err)
            end
            assert.is_true(held:release())
            if streams then
                -- a fence answered after the lock's validity ran out (here a
                -- 2 ms ttl: at once) is not used: the script takes the grant
                -- again, and the lock's validity counts from its request
                evalsha = calls(d, "evalsha")
                lock = assert(client:acquire(helper.key(), { ttl = 2 }))
                assert.equal(1, calls(d, "evalsha") - evalsha)
                assert.is_true(lock.fence > last)
            end
            client:close()
            d:close()
        end)

        it("keeps fences increasing per key across clients: counter deleted, flushed, lost in a restart", function()
            helper.needs("script_time")
            local s = helper.start_server()
            local d = core.conn(s:spec())
            local clients = {}
            for i = 1, 3 do clients[i] = redlock.new { servers = { s:url() } } end
            local take = taker(clients, helper.key())
            for _, lose in ipairs {
                function() d:command("DEL", COUNTER) end,
                function() d:command("FLUSHALL") end,
                function() s:restart() d:close() d = core.conn(s:spec()) end, -- no persistence
                function() d:command("SET", COUNTER, "12") end, -- a string counter, from before 5.0
            } do
                take()
                take({ fence = false })
                take()
                lose()
                helper.sleep(2)
                take()
                take()
            end
            for _, c in ipairs(clients) do c:close() end
            d:close()
        end)

        local skip = helper.lua54_only()
        it("keeps fences increasing when the server behind a kept connection changes (a proxy's failover)"
            .. (skip and " (" .. skip .. ")" or ""), function()
            if skip then return end
            helper.needs("streams")
            local m = helper.start_server()
            local r = helper.start_replica(m)
            local dm, dr = core.conn(m:spec()), core.conn(r:spec())
            -- a client behind a proxy that keeps its connection when it moves
            -- to the replica; others on the master directly
            local out = helper.fresh_dir("proxy") .. "/out"
            local pid = helper.read_cmd(string.format("%s/tests/switch_proxy 60 %d %d > %s 2>&1 & echo $!",
                os.getenv("REDLOCK_BUILD") and os.getenv("REDLOCK_BUILD"):gsub("/redlock$", "") or "build",
                m.port, r.port, out)):match("%d+")
            finally(function() os.execute("kill " .. pid .. " 2>/dev/null") end)
            local port
            assert.is_true(helper.eventually(5000, function()
                local f = io.open(out)
                port = f and f:read("*a"):match("port (%d+)")
                if f then f:close() end
                return port ~= nil
            end))
            local behind = redlock.new { servers = { "redis://127.0.0.1:" .. port } }
            local direct = redlock.new { servers = { m:url() } }
            local key = helper.key()
            local take = taker({ behind, direct }, key)
            take()
            take(nil, 1)
            -- the replica has those grants, and then misses the next ones
            -- (the other client's)
            assert.equal(1, dm:command("WAIT", 1, 5000))
            dr:command("REPLICAOF", "NO", "ONE")
            take(nil, 2)
            take(nil, 2)
            -- the proxy moves to the replica, now the master; the client's
            -- connection stays
            os.execute("kill -USR1 " .. pid)
            helper.sleep(2)
            take(nil, 1)
            take(nil, 1)
            behind:close()
            direct:close()
            dm:close()
            dr:close()
        end)

        it("takes the next millisecond's fence when the server gave 100 IDs in one", function()
            helper.needs("streams")
            local s = helper.start_server()
            local d = core.conn(s:spec())
            local ls = helper.start_server { config = NO_SCRIPTING }
            local ld = core.conn(ls:spec())
            for _, case in ipairs {
                { s, d, "auto", {} }, { s, d, "auto", { wait = 100 } }, { ls, ld, "legacy", {} },
            } do
                local server, data, mode, opts = case[1], case[2], case[3], case[4]
                local client = redlock.new { servers = { server:url() }, mode = mode }
                assert(client:acquire(helper.key())):release()
                -- the stream's last ID 150 within a ms 10 s ahead of the
                -- clock (and of the last ID): the next XADD * answers that
                -- ms, seq 151
                local t = data:command("TIME")
                local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + 10000
                local last = tonumber(helper.last_fence(data)) / 100 + 1767225600000
                if ms < last + 10 then ms = math.floor(last) + 10 end
                data:command("XADD", COUNTER, "MAXLEN", "0", string.format("%.0f-150", ms), "f", "1")
                local lock = assert(client:acquire(helper.key(), opts))
                assert.equal((ms + 1 - 1767225600000) * 100, lock.fence, mode)
                local info = data:command("XINFO", "STREAM", COUNTER)
                for i = 1, #info - 1, 2 do
                    if info[i] == "last-generated-id" then
                        assert.equal(string.format("%.0f-0", ms + 1), info[i + 1], mode)
                    end
                end
                local l2 = assert(client:acquire(helper.key(), opts))
                assert.equal(lock.fence + 1, l2.fence, mode)
                lock:release()
                l2:release()
                client:close()
            end
            d:close()
            ld:close()
        end)

        it("an acquire whose fence fails leaves nothing held, with the script or without", function()
            helper.needs("set_px")
            local s = helper.start_server()
            local d = core.conn(s:spec())
            -- b has run a script: its next acquire goes without one (SET NX PX
            -- and XADD), meets the counter of the wrong type, asks the
            -- script, which fails: b gives the key back. a's first acquire
            -- is the script, which fails before it writes the key.
            local a = redlock.new { servers = { s:url() } }
            local b = redlock.new { servers = { s:url() } }
            assert(b:acquire(helper.key())):release()
            d:command("DEL", COUNTER)
            d:command("SET", COUNTER, "not a number")
            for _, case in ipairs { { a, 0 }, { b, 1 }, { a, 0 } } do
                local client, sets = case[1], case[2]
                local key, before = helper.key(), calls(d, "set")
                local lock, err, code = client:acquire(key)
                assert.is_nil(lock)
                assert.equal("server", code)
                assert.matches("not an integer", err)
                assert.equal(0, d:command("EXISTS", key))
                assert.equal(sets, calls(d, "set") - before)
            end
            a:close()
            b:close()
            d:close()
        end)
    end)

    it("fence = false: lock.fence is nil and no counter is touched, in every mode", function()
        local s = helper.start_server()
        local ls = helper.start_server { config = NO_SCRIPTING }
        local q = { helper.start_server(), helper.start_server(), helper.start_server() }
        local cases = {
            { { s:url() }, "auto", { s } },
            { { ls:url() }, "legacy", { ls } },
            { { q[1]:url(), q[2]:url(), q[3]:url() }, "auto", q },
        }
        for _, case in ipairs(cases) do
            local client = redlock.new { servers = case[1], mode = case[2], fence = false }
            local lock = assert(client:acquire(helper.key()))
            assert.is_nil(lock.fence)
            assert.is_true(lock:release())
            local waited = assert(client:acquire(helper.key(), { wait = 100 }))
            assert.is_nil(waited.fence)
            waited:release()
            assert(client:with_lock(helper.key(), function(l) assert.is_nil(l.fence) end))
            -- per call, on a client with fences
            local fenced = redlock.new { servers = case[1], mode = case[2] }
            lock = assert(fenced:acquire(helper.key(), { fence = false }))
            assert.is_nil(lock.fence)
            lock:release()
            for _, server in ipairs(case[3]) do
                local d = core.conn(server:spec())
                assert.equal(0, d:command("EXISTS", COUNTER))
                local stats = d:command("INFO", "commandstats") or "" -- (none before 2.6)
                assert.is_nil(stats:find("cmdstat_incr", 1, true))
                assert.is_nil(stats:find("cmdstat_xadd", 1, true))
                d:close()
            end
            client:close()
            fenced:close()
        end
    end)

    it("companion keys share the lock key's Cluster slot, braces or not", function()
        helper.needs("cluster")
        local cluster = helper.start_server { config = { "cluster-enabled yes" } }
        local d = core.conn(cluster:spec())
        finally(function() d:close() end)
        local seen = {}
        for _, key in ipairs { "plain", "a{b}c", "{}x", "{{x}}", "x}y", "}{", "{", "}", "{a}", "a{}b}" } do
            local slot = d:command("CLUSTER", "KEYSLOT", key)
            assert.equal(slot, core.keyslot(key), key)
            for _, companion in ipairs { notify.waiters_key(key), notify.data_key(key), notify.wake_key(key),
                notify.handoff_key(key, "0123456789abcdef0123456789abcdef") } do
                assert.equal(slot, d:command("CLUSTER", "KEYSLOT", companion), key .. " -> " .. companion)
                assert.is_nil(seen[companion], companion .. " twice")
                seen[companion] = true
            end
        end
        for _, slot in ipairs { 0, 1, 12182, 16383 } do
            assert.equal(slot, d:command("CLUSTER", "KEYSLOT", core.slot_tag(slot)))
        end
    end)
end)
