-- The single lock's operations are one registry (lua/redlock/ops.lua): an
-- operation added there with its entry only (the steps of
-- docs/development.md, Adding a lock operation) is served by every layer:
-- the Server method, mode "auto" (which settles the mode first) and the
-- one-server strategy; legacy mode, which has no form of it, answers one
-- clear error. The operation added here, "touch", runs the extend script
-- under another name, against real redis-servers.
local helper = require "helper"

local format = string.format

local NOSCRIPT = {
    'rename-command EVAL ""', 'rename-command EVALSHA ""', 'rename-command SCRIPT ""',
    'rename-command FUNCTION ""', 'rename-command FCALL ""',
}

local function ours(name) return name == "redlock" or (name:find("^redlock%.") and name ~= "redlock.core") end

describe("a lock operation added to the registry", function()
    local saved, redlock, server, noscript = {}, nil, nil, nil

    setup(function()
        -- the modules loaded afresh: their layers are made from the
        -- registry, which now has the new entry
        for name, m in pairs(package.loaded) do
            if ours(name) then saved[name], package.loaded[name] = m, nil end
        end
        -- its entry only: the script-mode form is made from `args`
        local ops = require "redlock.ops"
        ops.list.touch = {
            what = "touching a lock", by_token = true, settle = true, single = "flag", script = "extend",
            args = function(_, key, token, ttl) return 1, key, token, format("%d", ttl) end,
        }
        redlock = require "redlock"
        server = helper.start_server()
        noscript = helper.start_server { config = NOSCRIPT }
    end)

    teardown(function()
        for name in pairs(package.loaded) do
            if ours(name) then package.loaded[name] = nil end
        end
        for name, m in pairs(saved) do package.loaded[name] = m end
        helper.stop_all()
    end)

    it("runs in script mode through the one-server strategy", function()
        helper.needs("set_px")
        local client = redlock.new { servers = { server:url() }, mode = "script" }
        local data = require("redlock.core").conn(server:spec())
        local key = helper.key("touch")
        local lock = assert(client:acquire(key, { ttl = 1000 }))
        assert.is_true((client.strategy.touch(client, key, lock.token, 60000)))
        assert.is_true(helper.pttl(data, key) > 1000)
        -- another token's: false, naming the server, as a release says it
        local ok, where = client.strategy.touch(client, key, redlock.token(), 60000)
        assert.is_false(ok)
        assert.equal(client.servers[1].name, where)
        assert.is_true(lock:release())
        data:close()
        client:close()
    end)

    it("runs over Redlock by a majority, from its entry alone", function()
        helper.needs("set_px")
        local others = { helper.start_server(), helper.start_server() }
        local urls = { server:url(), others[1]:url(), others[2]:url() }
        -- (server_timeout: every server answers, on a busy machine too; the
        -- default for a 1 s ttl is 10 ms)
        local client = redlock.new { servers = urls, server_timeout = 1000 }
        assert.equal("quorum", client.strategy.name)
        local key = helper.key("touch")
        local lock = assert(client:acquire(key, { ttl = 1000 }))
        assert.is_true((client.strategy.touch(client, key, lock.token, 60000)))
        for _, s in ipairs { server, others[1], others[2] } do
            local data = require("redlock.core").conn(s:spec())
            assert.is_true(helper.pttl(data, key) > 1000)
            data:close()
        end
        -- another token's: false, no server holds it for that token
        assert.is_false((client.strategy.touch(client, key, redlock.token(), 60000)))
        -- one server gone: a majority still answers
        others[2]:stop()
        assert.is_true((client.strategy.touch(client, key, lock.token, 60000)))
        -- two gone: no quorum, the servers named
        others[1]:stop()
        local ok, err, code = client.strategy.touch(client, key, lock.token, 60000)
        assert.is_nil(ok)
        assert.equal("no quorum", code)
        assert.truthy(err:find("touching a lock on 1 of 3 servers", 1, true))
        assert.truthy(err:find(client.servers[2].name, 1, true))
        -- (no quorum for the release either; the server still up is cleared)
        lock:release()
        local data = require("redlock.core").conn(server:spec())
        assert.equal(0, data:command("EXISTS", key))
        data:close()
        client:close()
    end)

    it("settles mode \"auto\" first, as the lock's own operations do", function()
        helper.needs("set_px") -- (before: legacy mode, the last test's error)
        local client = redlock.new { servers = { server:url() } }
        local one = client.servers[1]
        assert.is_nil(one:chosen_mode())
        assert.is_false((one:touch(helper.key("touch"), redlock.token(), 1000)))
        assert.equal("script", one:chosen_mode())
        client:close()
    end)

    it("answers one clear error where legacy mode has no form of it", function()
        local message = "touching a lock needs the server's scripts (legacy mode)"
        -- mode "legacy": a lock it took is touched by legacy's operations
        local client = redlock.new { servers = { server:url() }, mode = "legacy" }
        local key = helper.key("touch")
        local lock = assert(client:acquire(key))
        local ok, err, code = client.strategy.touch(client, key, lock.token, 60000)
        assert.is_nil(ok)
        assert.equal("server", code)
        assert.equal(format("server: %s: %s", client.servers[1].name, message), err)
        assert.is_true(lock:release())
        client:close()
        -- mode "auto" on a server that refuses scripting: settled to legacy
        -- by this operation, which then says the same
        client = redlock.new { servers = { noscript:url() } }
        ok, err, code = client.strategy.touch(client, key, redlock.token(), 60000)
        assert.is_nil(ok)
        assert.equal("server", code)
        assert.equal(format("server: %s: %s", client.servers[1].name, message), err)
        assert.equal("legacy", client.servers[1]:chosen_mode())
        client:close()
    end)
end)
