-- Memory faults (issue 38): a server that evicts keys under memory
-- pressure (maxmemory with an allkeys-* or volatile-* policy) may delete a
-- held lock and let a second holder in, silently: the library warns of such
-- a server at its first lock, before anything is evicted (an on_event
-- "warning", and one line in the log). A full memory under noeviction
-- ("OOM command not allowed ...") fails acquire with `server` and a message
-- that says so, and leaves nothing half-written.
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"
local util = require "redlock.util"

local function recorder()
    local seen = {}
    return function(ev) seen[#seen + 1] = ev end, seen
end

local function types(seen)
    local out = {}
    for i, ev in ipairs(seen) do out[i] = ev.type end
    return out
end

-- Runs fn with io.stderr replaced; returns what was written to it, then
-- fn's results.
local function stderr_of(fn)
    local real, text = io.stderr, {}
    io.stderr = { write = function(_, ...) for _, s in ipairs({ ... }) do text[#text + 1] = s end end } -- luacheck: ignore 122
    local ok, a, b, c = pcall(fn)
    io.stderr = real -- luacheck: ignore 122
    if not ok then error(a, 0) end
    return table.concat(text), a, b, c
end

local function used_memory(data)
    return tonumber(data:command("INFO", "memory"):match("used_memory:(%d+)"))
end

-- Lowers maxmemory to a little above what the server uses now: pressure.
local function squeeze(data, room)
    assert(data:command("CONFIG", "SET", "maxmemory", tostring(used_memory(data) + (room or 200000))))
end

-- Writes 500-byte values under fresh keys (with a ttl when ttl is given)
-- until done() or an error; returns the error, or nil.
local function fill(data, done, ttl)
    local value = string.rep("x", 500)
    for i = 1, 100000 do
        if done and done() then return nil end
        local k = "filler:" .. i
        local r, err
        if ttl then r, err = data:command("SET", k, value, "PX", tostring(ttl))
        else r, err = data:command("SET", k, value) end
        if r == nil then return err end
    end
    error("the server never filled up")
end

-- A full memory: some data, then maxmemory well below what the server
-- uses (so that the margin freed by a client's buffers never lets a write
-- through); returns the OOM error of a probe write.
local function oom(data)
    local value = string.rep("x", 500)
    for i = 1, 400 do assert(data:command("SET", "filler:" .. i, value)) end
    assert(data:command("CONFIG", "SET", "maxmemory", tostring(used_memory(data) - 100000)))
    local r, err = data:command("SET", "probe", "x")
    assert(r == nil, "the server took a write over its maxmemory")
    return err
end

-- Every key the library could have written for key, and the fence counter.
local function leftovers(data, key)
    local out = {}
    for _, k in ipairs({ key, "{" .. key .. "}:waiters", "{" .. key .. "}:waiting", "{" .. key .. "}:wake" }) do
        if data:command("EXISTS", k) ~= 0 then out[#out + 1] = k end
    end
    return table.concat(out, " ")
end

describe("eviction", function()
    teardown(function() helper.stop_all() end)

    it("allkeys-lru: warned at the first lock (event and one log line), before Redis evicts the held lock",
        function()
            local server = helper.start_server { config = { "maxmemory 100mb", "maxmemory-policy allkeys-lru" } }
            local data = core.conn(server:spec())
            local hook, seen = recorder()
            local key = helper.key("evicted")
            local client = redlock.new { servers = { server:url() }, on_event = hook }
            local log, lock = stderr_of(function() return assert(client:acquire(key, { ttl = 60000 })) end)
            assert.same({ "warning", "acquired" }, types(seen))
            local w = seen[1]
            assert.equal(client.servers[1].name, w.server)
            assert.equal("allkeys-lru", w.policy)
            assert.equal(util.show_key(key), w.key)
            assert.matches("may evict lock keys: maxmemory%-policy allkeys%-lru", w.err)
            assert.matches("second holder", w.err)
            local first_line = "redlock: warning: " .. w.err .. "\n"
            assert.equal(first_line, log)
            -- once per server and client: a second lock says nothing more
            local log2 = stderr_of(function() assert(assert(client:acquire(helper.key())):release()) end)
            assert.equal("", log2)
            assert.same({ "warning", "acquired", "acquired", "released" }, types(seen))
            -- another client is told too (its own hook), the log is not
            local hook2, seen2 = recorder()
            local other = redlock.new { servers = { server:url() }, on_event = hook2, mode = "script" }
            local log3 = stderr_of(function() assert(assert(other:acquire(helper.key())):release()) end)
            assert.equal("", log3)
            assert.same({ "warning", "acquired", "released" }, types(seen2))

            -- memory pressure: Redis evicts the held lock, and a second
            -- holder gets it while the first still counts it valid
            squeeze(data)
            fill(data, function() return data:command("EXISTS", key) == 0 end)
            assert.is_true(lock:remaining() > 0)
            data:command("CONFIG", "SET", "maxmemory", "0")
            data:command("FLUSHALL")
            local second = assert(other:try_acquire(key))
            assert.is_true(lock:remaining() > 0, "two holders at once: the hazard the warning is about")
            assert.is_true(second:release())
            local _, _, code = lock:release()
            assert.equal("not owner", code)
            client:close()
            other:close()
            data:close()
            server:stop()
        end)

    it("volatile-lru: the lock key (it has a ttl) is evicted first, keys without a ttl stay", function()
        local server = helper.start_server { config = { "maxmemory 100mb", "maxmemory-policy volatile-lru" } }
        local data = core.conn(server:spec())
        local hook, seen = recorder()
        local key = helper.key("volatile")
        local client = redlock.new { servers = { server:url() }, on_event = hook, mode = "legacy" }
        local _, lock = stderr_of(function() return assert(client:acquire(key, { ttl = 60000 })) end)
        assert.same({ "warning", "acquired" }, types(seen))
        assert.equal("volatile-lru", seen[1].policy)
        squeeze(data)
        -- (the write that evicts it may still be refused: OOM once nothing
        -- with a ttl is left)
        fill(data, function() return data:command("EXISTS", key) == 0 end)
        assert.equal(0, data:command("EXISTS", key))
        assert.equal(1, data:command("EXISTS", "filler:1"))
        local _, _, code = lock:release()
        assert.equal("not owner", code)
        client:close()
        data:close()
        server:stop()
    end)

    it("Redlock: each evicting server is named once, the others not", function()
        local a = helper.start_server { config = { "maxmemory 100mb", "maxmemory-policy allkeys-lfu" } }
        local b = helper.start_server { config = { "maxmemory 100mb", "maxmemory-policy noeviction" } }
        local c = helper.start_server()
        local hook, seen = recorder()
        local client = redlock.new { servers = { a:url(), b:url(), c:url() }, on_event = hook, server_timeout = 1000 }
        stderr_of(function()
            assert(assert(client:acquire(helper.key())):release())
            assert(assert(client:acquire(helper.key())):release())
        end)
        assert.same({ "warning", "acquired", "released", "acquired", "released" }, types(seen))
        assert.equal(client.servers[1].name, seen[1].server)
        assert.equal("allkeys-lfu", seen[1].policy)
        client:close()
        a:stop()
        b:stop()
        c:stop()
    end)

    it("noeviction, or an evicting policy without maxmemory: no warning", function()
        local a = helper.start_server { config = { "maxmemory 100mb", "maxmemory-policy noeviction" } }
        local b = helper.start_server { config = { "maxmemory-policy allkeys-lru" } }
        for _, s in ipairs({ a, b }) do
            local hook, seen = recorder()
            local client = redlock.new { servers = { s:url() }, on_event = hook }
            local log = stderr_of(function() assert(assert(client:acquire(helper.key())):release()) end)
            assert.equal("", log)
            assert.same({ "acquired", "released" }, types(seen))
            client:close()
            s:stop()
        end
    end)
end)

describe("a full memory (noeviction)", function()
    teardown(function() helper.stop_all() end)

    for _, mode in ipairs({ "script", "legacy" }) do
        it(mode .. " mode: acquire fails with 'server' saying OOM, and writes nothing (lock, waiters, fence)",
            function()
                local server = helper.start_server { config = { "maxmemory-policy noeviction" } }
                local data = core.conn(server:spec())
                local client = redlock.new { servers = { server:url() }, mode = mode, retry_delay = 10 }
                local held_key, key = helper.key("held"), helper.key("oom")
                local held = assert(client:acquire(held_key, { ttl = 60000 }))
                local fence = helper.last_fence(data)
                assert.matches(": OOM command not allowed", oom(data))
                local lock, err, code = client:try_acquire(key)
                assert.is_nil(lock)
                assert.equal("server", code)
                assert.matches("^server: " .. client.servers[1].name:gsub("%p", "%%%0")
                    .. ": OOM command not allowed when used memory > 'maxmemory'", err)
                assert.matches("acquiring " .. util.show_key(key):gsub("%p", "%%%0"), err)
                -- a waiter behind a holder: in legacy mode (only reads
                -- while the key is held) it waits and gives up as usual; in
                -- script mode its first attempt may be SET NX PX with the
                -- fence's XADD (redlock.scripted.grant), which a full memory
                -- refuses before it can say the key is held: `server`, OOM,
                -- at once; or the acquire script, which is let go on under
                -- OOM (its waiters queue entry made, then removed when it
                -- gives up): `timeout`
                lock, err, code = client:acquire(held_key, { wait = 300 })
                assert.is_nil(lock)
                if mode == "legacy" then
                    assert.equal("timeout", code, err)
                elseif code == "server" then
                    assert.matches("OOM command not allowed", err)
                else
                    assert.equal("timeout", code, err)
                end
                assert.equal("", leftovers(data, key))
                assert.equal(held_key, leftovers(data, held_key))
                assert.equal(fence, helper.last_fence(data))
                data:command("CONFIG", "SET", "maxmemory", "0")
                assert.is_true(held:release())
                lock = assert(client:try_acquire(key))
                assert.is_true(lock.fence > held.fence)
                assert.is_true(lock:release())
                client:close()
                data:close()
                server:stop()
            end)
    end

    it("script mode: a held lock is still extended and released (PEXPIRE and DEL need no memory)", function()
        local server = helper.start_server { config = { "maxmemory-policy noeviction" } }
        local data = core.conn(server:spec())
        local hook, seen = recorder()
        local client = redlock.new { servers = { server:url() }, mode = "script", on_event = hook }
        local key = helper.key("renewed")
        local ok, err = client:with_lock(key, { ttl = helper.ms(400) }, function()
            assert.matches(": OOM command not allowed", oom(data))
            core.sleep(helper.ms(1000)) -- renewals every ttl/3 or so, under OOM
            return true
        end)
        assert.is_true(ok, err)
        local t = types(seen)
        assert.equal("acquired", t[1])
        assert.equal("released", t[#t])
        local renewed = false
        for _, ev in ipairs(seen) do
            assert.is_not.equal("renew_failed", ev.type)
            if ev.type == "renewed" then renewed = true end
        end
        assert.is_true(renewed)
        assert.equal("", leftovers(data, key))
        data:command("CONFIG", "SET", "maxmemory", "0")
        client:close()
        data:close()
        server:stop()
    end)

    it("legacy mode: renewal under OOM is reported (renew_failed, then lost), and the lock expires", function()
        local server = helper.start_server { config = { "maxmemory-policy noeviction" } }
        local data = core.conn(server:spec())
        local hook, seen = recorder()
        local client = redlock.new { servers = { server:url() }, mode = "legacy", on_event = hook }
        local key = helper.key("legacy-renewed")
        local ok, err, code = client:with_lock(key, { ttl = 400 }, function()
            assert.matches(": OOM command not allowed", oom(data))
            core.sleep(1000)
            return true
        end)
        assert.is_nil(ok)
        assert.equal("not owner", code, err)
        local failed, lost
        for _, ev in ipairs(seen) do
            if ev.type == "renew_failed" then failed = ev end
            if ev.type == "lost" then lost = ev end
        end
        assert.is_not_nil(failed, table.concat(types(seen), " "))
        assert.matches("OOM command not allowed", failed.err)
        assert.is_not_nil(lost)
        -- nothing held beyond its ttl
        assert.is_true(helper.eventually(1000, function() return data:command("EXISTS", key) == 0 end))
        data:command("CONFIG", "SET", "maxmemory", "0")
        client:close()
        data:close()
        server:stop()
    end)
end)
