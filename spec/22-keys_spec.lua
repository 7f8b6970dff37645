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
            if k ~= "redlock:fence" and helper.pttl(data, k) == -1 then out[#out + 1] = k end
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
        churn(redlock.new { servers = urls }, datas)
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
            assert.equal(0, d:command("EXISTS", "redlock:fence"))
            d:close()
            client = redlock.new { servers = { server:url() }, mode = mode }
            local lock = assert(client:acquire(helper.key()))
            assert.is_true(lock.fence > last, mode .. ": " .. lock.fence .. " after " .. last)
            assert.is_true(lock:release())
            client:close()
        end
    end)

    -- The uncontended acquire takes SET NX PX and the fence's INCR without a
    -- script (redlock.scripted.grant); the acquire script, which raises the
    -- counter to the server's clock, runs on a connection's first grant and
    -- after RAISED_MS without one. A counter that goes back (lost) must not
    -- give a fence at or below one given before, on the same client.
    describe("the acquire without a script", function()
        local scripted = require "redlock.scripted"
        local function calls(d, name)
            local info = d:command("INFO", "commandstats")
            local n = tonumber(info:match("cmdstat_" .. name .. ":calls=(%d+)") or "0")
            -- (2.6 and 2.8 count EVALSHA as eval)
            if name == "evalsha" then n = n + tonumber(info:match("cmdstat_eval:calls=(%d+)") or "0") end
            return n
        end
        -- Before Redis 3.2 a script cannot read TIME and write: the fence is
        -- the counter alone, which starts again at 1 when lost (docs/fencing.md)
        local function clocked(d)
            local major, minor = d:command("INFO", "server"):match("redis_version:(%d+)%.(%d+)")
            return tonumber(major) * 100 + tonumber(minor) >= 302
        end

        it("sends SET NX PX and INCR, and one script (the release)", function()
            local s = helper.start_server()
            local d = core.conn(s:spec())
            local client = redlock.new { servers = { s:url() } }
            assert(client:acquire(helper.key())):release() -- the first grant: the script
            local evalsha, set, incr = calls(d, "evalsha"), calls(d, "set"), calls(d, "incr")
            local last = 0
            for _ = 1, 10 do
                local lock = assert(client:acquire(helper.key()))
                assert.is_true(lock.fence > last)
                last = lock.fence
                assert.is_true(lock:release())
            end
            assert.equal(10, calls(d, "evalsha") - evalsha)
            assert.equal(10, calls(d, "set") - set)
            assert.equal(10, calls(d, "incr") - incr)
            -- fence = false: SET NX PX alone
            incr = calls(d, "incr")
            local lock = assert(client:acquire(helper.key(), { fence = false }))
            assert.is_nil(lock.fence)
            assert.is_true(lock:release())
            assert.equal(incr, calls(d, "incr"))
            -- held: locked, with the holder's pttl
            local key = helper.key()
            local held = assert(client:acquire(key, { ttl = 60000 }))
            for _ = 1, 2 do
                local _, err, code = client:try_acquire(key)
                assert.equal("locked", code)
                assert.matches("expires in %d+ ms", err)
            end
            assert.is_true(held:release())
            -- a fence answered after the lock's validity ran out (here a 2 ms
            -- ttl: at once) is not used: the script takes the grant again
            evalsha = calls(d, "evalsha")
            lock = assert(client:acquire(helper.key(), { ttl = 2 }))
            assert.equal(1, calls(d, "evalsha") - evalsha)
            assert.is_true(lock.fence > last)
            client:close()
            d:close()
        end)

        it("keeps fences increasing when the counter is lost under a client: FLUSHALL, restart", function()
            local s = helper.start_server()
            local d = core.conn(s:spec())
            if not clocked(d) then return d:close() end
            for _, fenced_first in ipairs { true, false } do
                local client = redlock.new { servers = { s:url() } }
                local last = 0
                local function take()
                    local lock = assert(client:acquire(helper.key()))
                    assert.is_true(lock.fence > last, lock.fence .. " after " .. last)
                    last = lock.fence
                    assert.is_true(lock:release())
                end
                for _ = 1, 5 do take() end
                -- lost while the connection stays: INCR starts again at 1
                d:command("FLUSHALL")
                take()
                take()
                -- lost with a restart (no persistence), same client
                s:restart()
                if not fenced_first then assert(client:acquire(helper.key(), { fence = false })):release() end
                take()
                take()
                client:close()
                d:close()
                d = core.conn(s:spec())
            end
            d:close()
        end)

        it("raises the counter to the clock again after RAISED_MS without a grant", function()
            local s = helper.start_server()
            local d = core.conn(s:spec())
            if not clocked(d) then return d:close() end
            local a = redlock.new { servers = { s:url() } }
            local b = redlock.new { servers = { s:url() } }
            local la = assert(a:acquire(helper.key()))
            assert.is_true(la:release())
            local lb = assert(b:acquire(helper.key()))
            assert.is_true(lb:release())
            assert.is_true(lb.fence > la.fence)
            -- b's grant lost (a failover to a replica that missed it): the
            -- counter goes back to just above a's fence
            d:command("SET", "redlock:fence", string.format("%.0f", la.fence + 1))
            helper.sleep(scripted.RAISED_MS + 20)
            local la2 = assert(a:acquire(helper.key()))
            assert.is_true(la2.fence > lb.fence, la2.fence .. " after " .. lb.fence)
            assert.is_true(la2:release())
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
                assert.equal(0, d:command("EXISTS", "redlock:fence"))
                assert.is_nil(d:command("INFO", "commandstats"):find("cmdstat_incr", 1, true))
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
