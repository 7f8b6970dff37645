-- What differs between the hosts the module runs on: Lua 5.1, 5.2, 5.3,
-- 5.4 and LuaJIT (`make test-matrix` runs every spec under each), and plain
-- Lua versus nginx (spec/41-openresty_spec.lua runs the nginx side).
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"
local cosocket = require "redlock.cosocket"

local is_integer = math.type and function(n) return math.type(n) == "integer" end
    or function(n) return type(n) == "number" and n == math.floor(n) end

describe("hosts: " .. (rawget(_G, "jit") and jit.version or _VERSION), function()
    local server, client, data
    setup(function()
        server = helper.start_server()
        client = redlock.new { servers = { server:url() }, retry_delay = 5, retry_jitter = 2 }
        data = core.conn(server:spec())
    end)
    teardown(function()
        client:close()
        data:close()
        helper.stop_all()
    end)

    it("loads the core built for this interpreter", function()
        assert.equal("table", type(core))
        assert.equal(32, #redlock.token())
        assert.equal("function", type(core.encode))
    end)

    it("uses hiredis' sockets and a blocking sleep outside nginx", function()
        assert.is_false(cosocket.in_nginx())
        assert.equal(require("redlock.server"), client.transport)
        assert.equal(core.sleep, client.transport.sleep)
    end)

    it("takes a global 'ngx' without the Lua module's API for plain Lua", function()
        rawset(_G, "ngx", { null = core.null })
        local ok, in_nginx = pcall(cosocket.in_nginx)
        local c = redlock.new { servers = { server:url() } }
        rawset(_G, "ngx", nil)
        assert.is_true(ok)
        assert.is_false(in_nginx)
        assert.equal(require("redlock.server"), c.transport)
        c:close()
    end)

    it("gives integer fences and integer replies, exact up to 2^53", function()
        local key = helper.key()
        local lock = assert(client:acquire(key))
        assert.is_true(is_integer(lock.fence))
        assert.is_true(lock.fence > 2 ^ 40) -- the server's clock: ms since 2026, x 100
        assert.is_true(lock:release())
        -- a counter near 2^53 (a double's last exact integer)
        helper.set_fence(data, 9007199254740980)
        finally(function() data:command("DEL", "redlock:fences") end)
        lock = assert(client:acquire(key))
        assert.is_true(is_integer(lock.fence))
        assert.equal(9007199254740981, lock.fence)
        assert.equal("9007199254740981", string.format("%.0f", lock.fence))
        assert.is_true(lock:release())
        assert.equal(1, data:command("INCR", key .. ":n"))
        assert.is_true(is_integer(data:command("PTTL", key .. ":n")))
    end)

    it("takes whole-number floats (1e3) and fractions where a number of ms may have one", function()
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 1e3, retry_delay = 0.5, retry_jitter = 0.25 }))
        local pttl = data:command("PTTL", key)
        assert.is_true(pttl > 0 and pttl <= 1000, "pttl " .. tostring(pttl))
        assert.is_true(is_integer(lock:remaining()))
        assert.is_true(lock:extend(2e3))
        -- a fractional wait ends in 'timeout', its message in whole ms
        local other, err, code = client:acquire(key, { wait = 50.5 })
        assert.is_nil(other)
        assert.equal("timeout", code)
        assert.matches("^timeout: waited 50 ms for ", err)
        assert.is_true(lock:release())
    end)

    it("keeps trailing nils of with_lock's results on every version", function()
        local r = { client:with_lock(helper.key(), function() return 1, nil, 3, nil end) }
        assert.equal(true, r[1])
        assert.equal(1, r[2])
        assert.equal(3, r[4])
        assert.equal(5, select("#", client:with_lock(helper.key(), function() return 1, nil, 3, nil end)))
    end)

    it("raises the same error value out of with_lock on every version", function()
        local key = helper.key()
        local boom = setmetatable({}, { __tostring = function() return "boom" end })
        local ok, e = pcall(client.with_lock, client, key, function() error(boom) end)
        assert.is_false(ok)
        assert.equal(boom, e)
        assert.equal(0, data:command("EXISTS", key))
    end)
end)
