-- Fences that fail or start from odd counters (review-i35b): a release
-- whose hand-off fence fails still releases and leaves no key without a
-- ttl; legacy mode's conversion of a string counter ahead of the clock
-- keeps its fences above it, and a legacy acquire whose fence fails leaves
-- nothing held; the acquire without a script comes back on a new
-- connection; the Redlock write-back reports an error it could not act on.
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"
local notify = require "redlock.notify"

local COUNTER = "redlock:fences"
local EPOCH = 1767225600000
local NO_SCRIPTING = {
    'rename-command EVAL ""', 'rename-command EVALSHA ""', 'rename-command SCRIPT ""',
    'rename-command FUNCTION ""', 'rename-command FCALL ""',
}

-- Every key but the counter has a ttl.
local function no_immortal(d)
    for _, k in ipairs(d:command("KEYS", "*")) do
        if k ~= COUNTER then assert.is_true(d:command("PTTL", k) >= 0, k .. " has no ttl") end
    end
end

local function calls(d, name)
    local info = d:command("INFO", "commandstats")
    local n = tonumber(info:match("cmdstat_" .. name .. ":calls=(%d+)") or "0")
    if name == "evalsha" then n = n + tonumber(info:match("cmdstat_eval:calls=(%d+)") or "0") end
    return n
end

describe("fences that fail", function()
    local it = helper.needing(it, "script_time")
    local client, data
    setup(function()
        local _
        _, client, data = helper.single_server()
    end)
    teardown(function() helper.close_all(client, data) end)
    before_each(function() data:command("DEL", COUNTER) end)

    -- waiter(key, token): queues a fenced waiter by its own script, as a
    -- waiting client's refused attempt does; then the counter becomes a
    -- hash and the holder releases
    local function case(lock_opts, waiter)
        local key = helper.key("handoff")
        local holder = assert(client:acquire(key, lock_opts))
        for i = 1, 2 do
            local r = waiter(key, "waiter" .. i)
            assert.equal(0, r[1])
        end
        data:command("DEL", COUNTER)
        data:command("HSET", COUNTER, "a", "1")
        -- the release still releases: the hand-off wakes the waiters
        -- instead, whose own acquire fails at its fence
        assert.is_true(holder:release())
        assert.equal(0, data:command("EXISTS", key))
        no_immortal(data)
        local _, _, code = client:try_acquire(key)
        assert.equal("server", code)
        assert.equal(0, data:command("EXISTS", key))
        data:command("DEL", COUNTER)
    end

    local function companions(key, token)
        return notify.waiters_key(key), notify.data_key(key), notify.handoff_key(key, token)
    end

    it("readers waiting behind a writer: its release leaves no key without a ttl", function()
        case({ ttl = 10000 }, function(key, token)
            local w, d, h = companions(key, token)
            return data:eval("rw_read", 5, key, w, d, h, COUNTER, token, "10000", "5000", "h", "1")
        end)
    end)

    it("a writer waiting behind a holder: the release releases", function()
        case({ ttl = 10000 }, function(key, token)
            local w, d, h = companions(key, token)
            return data:eval("acquire", 5, key, w, d, h, COUNTER, token, "10000", "5000", "h")
        end)
    end)

    it("a permit's waiter: giving a permit back still gives it back", function()
        case({ ttl = 10000, limit = 1 }, function(key, token)
            local w, d, h = companions(key, token)
            return data:eval("sem_acquire", 5, key, w, d, h, COUNTER, token, "10000", "1", "5000", "h", "1")
        end)
    end)

    it("the last reader leaving with a writer waiting: the key is not left behind", function()
        case({ ttl = 10000, shared = true }, function(key, token)
            local w, d, h = companions(key, token)
            return data:eval("acquire", 5, key, w, d, h, COUNTER, token, "10000", "5000", "h")
        end)
    end)

    it("the Redlock write-back answers an error it cannot act on, never success", function()
        helper.needs("streams")
        assert(client:acquire(helper.key())):release()
        -- a fence past any stream ID: the explicit XADD is refused
        local r, err = data:eval("fence_raise", 1, COUNTER, "1e30")
        assert.is_nil(r)
        assert.matches("Invalid stream ID", err)
        assert.equal(1, data:eval("fence_raise", 1, COUNTER, "100"))
    end)
end)

describe("legacy mode's fences", function()
    local it = helper.needing(it, "streams")
    local server, data
    setup(function()
        server = helper.start_server { config = NO_SCRIPTING }
        data = core.conn(server:spec())
    end)
    teardown(function()
        data:close()
        helper.stop_all()
    end)

    it("a string counter ahead of the clock: the stream counts on above it", function()
        for _, legacy_value in ipairs { "token", "plain" } do
            local client = redlock.new { servers = { server:url() }, mode = "legacy", legacy_value = legacy_value }
            local t = data:command("TIME")
            local ahead = (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + 5000 - EPOCH) * 100
            data:command("DEL", COUNTER)
            data:command("SET", COUNTER, string.format("%.0f", ahead))
            local key = helper.key()
            local lock = assert(client:acquire(key))
            assert.is_true(lock.fence > ahead, string.format("%s: fence %.0f below the counter's %.0f",
                legacy_value, lock.fence, ahead))
            assert.equal("stream", data:command("TYPE", COUNTER))
            local l2 = assert(client:acquire(helper.key()))
            assert.is_true(l2.fence > lock.fence)
            assert.is_true(lock:release())
            assert.is_true(l2:release())
            client:close()
        end
    end)

    it("an acquire whose fence fails leaves nothing held", function()
        local client = redlock.new { servers = { server:url() }, mode = "legacy" }
        for _, bad in ipairs { { "HSET", COUNTER, "a", "1" }, { "SET", COUNTER, "not a number" } } do
            data:command("DEL", COUNTER)
            data:command((table.unpack or unpack)(bad))
            local key = helper.key()
            local lock, _, code = client:acquire(key)
            assert.is_nil(lock)
            assert.equal("server", code)
            assert.equal(0, data:command("EXISTS", key))
        end
        data:command("DEL", COUNTER)
        client:close()
    end)
end)

describe("the acquire without a script", function()
    it("comes back on a new connection after a server without XADD", function()
        helper.needs("streams", "set_px", "evalsha_stats")
        local s = helper.start_server { config = { 'rename-command XADD ""' } }
        local client = redlock.new { servers = { s:url() } }
        for _ = 1, 3 do assert(client:acquire(helper.key())):release() end
        -- the same server, now with XADD, behind a new connection
        s.config = {}
        s:restart()
        local d = core.conn(s:spec())
        assert(client:acquire(helper.key())):release()
        local evalsha, xadd = calls(d, "evalsha"), calls(d, "xadd")
        for _ = 1, 10 do assert(client:acquire(helper.key())):release() end
        -- the releases only: every acquire went without a script
        assert.equal(10, calls(d, "evalsha") - evalsha)
        assert.equal(10, calls(d, "xadd") - xadd)
        client:close()
        d:close()
        helper.stop_all()
    end)
end)
