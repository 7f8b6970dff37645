-- Bad input raises, naming the argument; URLs parse; secrets stay hidden.
local redlock = require "redlock"
local addresses = require "redlock.addresses"

local function raises(pattern, f)
    local ok, err = pcall(f)
    assert.is_false(ok)
    assert.matches(pattern, tostring(err))
    return err
end

describe("options", function()
    it("new() takes no options at all", function()
        local c = redlock.new()
        assert.equal("redlock.client (127.0.0.1:6379)", tostring(c))
        c:close()
    end)

    it("raises on bad options to new, naming them", function()
        raises("bad argument #1 to 'new' %(table expected, got string%)", function() redlock.new("x") end)
        raises("bad option 'ttl' to 'new'", function() redlock.new { ttl = 0 } end)
        raises("bad option 'ttl' to 'new'", function() redlock.new { ttl = -5 } end)
        raises("bad option 'ttl' to 'new'", function() redlock.new { ttl = 1.5 } end)
        raises("bad option 'ttl' to 'new'", function() redlock.new { ttl = "100" } end)
        raises("bad option 'wait' to 'new'", function() redlock.new { wait = -1 } end)
        raises("bad option 'wait' to 'new'", function() redlock.new { wait = 0 / 0 } end)
        raises("bad option 'retry_delay' to 'new'", function() redlock.new { retry_delay = 0 } end)
        raises("bad option 'retry_jitter' to 'new'", function() redlock.new { retry_jitter = -1 } end)
        raises("bad option 'drift_factor' to 'new'", function() redlock.new { drift_factor = 1 } end)
        raises("bad option 'mode' to 'new'", function() redlock.new { mode = "fast" } end)
        raises("bad option 'timeout' to 'new'", function() redlock.new { timeout = 0 } end)
        raises("bad option 'colour' to 'new' %(unknown option%)", function() redlock.new { colour = 1 } end)
        raises("bad option 'servers' to 'new'", function() redlock.new { servers = {} } end)
        raises("bad option 'servers' to 'new'", function() redlock.new { servers = { 42 } } end)
        raises("bad option 'servers' to 'new'", function() redlock.new { servers = { { port = 1 } } } end)
        raises("bad option 'servers' to 'new'", function() redlock.new { servers = { { host = "h", nope = 1 } } } end)
        raises("bad option 'servers' to 'new'", function() redlock.new { servers = { "http://x" } } end)
        raises("bad option 'servers' to 'new'", function() redlock.new { servers = { "redis://h:99999" } } end)
        raises("bad option 'servers' to 'new'", function() redlock.new { servers = { "redis://h/x" } } end)
    end)

    it("allows wait = 0 and retry_jitter = 0", function()
        redlock.new { wait = 0, retry_jitter = 0 }:close()
    end)

    it("raises on bad per-call options and bad keys", function()
        local c = redlock.new()
        raises("bad option 'ttl' to 'acquire'", function() c:acquire("k", { ttl = 0 }) end)
        raises("bad option 'bogus' to 'try_acquire'", function() c:try_acquire("k", { bogus = 1 }) end)
        raises("bad option 'mode' to 'acquire' %(unknown option%)", function() c:acquire("k", { mode = "legacy" }) end)
        raises("bad argument 'opts' to 'acquire'", function() c:acquire("k", 5) end)
        raises("bad argument #1 to 'acquire' %(string expected, got nil%)", function() c:acquire() end)
        raises("bad argument #1 to 'acquire' %(string expected, got number%)", function() c:acquire(5) end)
        raises("bad argument #1 to 'try_acquire' %(non%-empty string expected%)", function() c:try_acquire("") end)
        raises("bad argument #2 to 'with_lock' %(function expected, got nil%)", function() c:with_lock("k") end)
        raises("bad argument #3 to 'with_lock' %(function expected, got string%)",
            function() c:with_lock("k", {}, "f") end)
        c:close()
    end)

    it("never shows a password in an option error", function()
        local err = raises("bad option 'servers'", function()
            redlock.new { servers = { "redis://user:s3cret@host:notaport" } }
        end)
        assert.is_nil(tostring(err):find("s3cret", 1, true))
        for _, url in ipairs { "redis://s3cret@host:notaport", "redis://u:s3cret@h/x", "redis://:s3cret@",
                               "redis://a:b@s3cret@h:0", "redis://a:b@s3cret@h:6379",
                               "redis://user:pa/s3cret@host:1", "redis://u:s3cret/x@h",
                               -- schemes that are not letters only, and none
                               "redis+sentinel://u:s3cret@h:1", "rediss2://u:s3cret@h",
                               "u:s3cret@h:6379", "s3cret@h" } do
            err = raises("bad option 'servers'", function() redlock.new { servers = { url } } end)
            assert.is_nil(tostring(err):find("s3cret", 1, true), err)
        end
    end)

    describe("parse_url", function()
        it("reads every part of redis:// URLs", function()
            assert.same({ host = "h" }, addresses.parse_url("redis://h"))
            assert.same({ host = "h", port = 7000, db = 3 }, addresses.parse_url("redis://h:7000/3"))
            assert.same({ host = "h", password = "pw" }, addresses.parse_url("redis://:pw@h"))
            assert.same({ host = "h", password = "pw" }, addresses.parse_url("redis://pw@h"))
            assert.same({ host = "h", username = "u", password = "p@ss:w" },
                addresses.parse_url("redis://u:p%40ss%3aw@h"))
            assert.same({ host = "::1", port = 6380 }, addresses.parse_url("redis://[::1]:6380"))
        end)

        it("refuses a bracketed host with [ or / inside", function()
            for _, url in ipairs({ "redis://[//[::1]:6", "redis://[a/b]:6", "redis://[[::1]]:6",
                "redis+cluster://[//[::1]:6", "redis+sentinel://[a/b]:6/m" }) do
                assert.has_error(function() redlock.new { servers = url } end)
            end
        end)

        it("reads unix:// URLs", function()
            assert.same({ path = "/tmp/r.sock" }, addresses.parse_url("unix:///tmp/r.sock"))
            assert.same({ path = "/tmp/r.sock", db = 2 }, addresses.parse_url("unix:///tmp/r.sock?db=2"))
        end)
    end)
end)
