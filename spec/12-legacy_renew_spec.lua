-- Renewal in legacy mode (the C thread's WATCH/MULTI/EXEC extend), and
-- legacy_value = "plain", against a redis-server whose scripting commands
-- are renamed away: modes legacy and auto. (with_lock around a long fn:
-- spec/10; redlock run: spec/50; no WATCH: spec/30.)
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"


local NOSCRIPT = {
    'rename-command EVAL ""', 'rename-command EVALSHA ""', 'rename-command SCRIPT ""',
    'rename-command FUNCTION ""', 'rename-command FCALL ""',
}

local eventually = helper.eventually

describe("legacy renewal", function()
    local srv, data
    local clients = {}
    local function new(opts)
        opts.servers = { srv:url() }
        local c = redlock.new(opts)
        clients[#clients + 1] = c
        return c
    end
    setup(function()
        srv = helper.start_server { config = NOSCRIPT }
        data = assert(core.conn(srv:spec()))
    end)
    teardown(function()
        for _, c in ipairs(clients) do c:close() end
        data:close()
        helper.stop_all()
    end)

    for _, mode in ipairs { "legacy", "auto" } do
        describe("mode " .. mode, function()
            it("the renewal finds another value in the key: lost ('gone'), on_lost runs", function()
                local client = new { mode = mode }
                local key, why = helper.key(), nil
                local lock = assert(client:acquire(key, { ttl = helper.ms(300), renew = true,
                    on_lost = function(_, w) why = w end }))
                data:command("SET", key, string.format("%d:%s", math.floor(core.time()) + 60000,
                    redlock.token()))
                assert.is_true(eventually(helper.ms(3000), function() return lock:lost() end))
                assert.equal("gone", select(2, lock:lost()))
                local ok, _, code = lock:release()
                assert.is_nil(ok)
                assert.equal("not owner", code)
                assert.equal("gone", why)
            end)

            it("stops at max_hold; the key then expires and the lock is lost", function()
                local client = new { mode = mode }
                local key = helper.key()
                local lock = assert(client:acquire(key, { ttl = helper.ms(300), renew = true,
                    max_hold = helper.ms(700) }))
                core.sleep(helper.ms(500))
                assert.is_false(lock:lost()) -- renewed past its ttl
                assert.is_true(eventually(helper.ms(5000), function() return lock:lost() end))
                assert.equal("max_hold", select(2, lock:lost()))
                assert.is_true(eventually(helper.ms(3000), function() return data:command("EXISTS", key) == 0 end))
            end)
        end)
    end

    it("legacy_value = \"plain\" writes the expiry alone, checks it on release; not renewed", function()
        assert.has_error(function() redlock.new { servers = { srv:url() }, legacy_value = "x" } end,
            "bad option 'legacy_value' to 'new' (\"token\" or \"plain\" expected, got \"x\")")
        local client = new { mode = "legacy", legacy_value = "plain" }
        local other = new { mode = "legacy", legacy_value = "plain" }
        local key = helper.key()
        local lock = assert(client:acquire(key, { ttl = 4000, renew = true }))
        assert.is_falsy(lock.renewal)
        local v = data:command("GET", key)
        assert.matches("^%d+$", v)
        assert.equal("locked", select(3, other:try_acquire(key)))
        assert.is_true(lock:extend(5000))
        assert.is_true(lock:release())
        assert.equal(0, data:command("EXISTS", key))
        -- a value someone else wrote since is not ours to delete
        lock = assert(client:acquire(key, { ttl = 4000 }))
        data:command("SET", key, string.format("%d", math.floor(core.time()) + 9000))
        assert.is_nil((lock:release()))
        assert.equal(1, data:command("EXISTS", key))
    end)
end)
