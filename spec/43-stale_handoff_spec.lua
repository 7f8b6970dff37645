-- A waiter paused after a release handed it the lock, past that lock's ttl,
-- while another holder took the key: whatever its acquire returns never
-- counts as held while the other's lock is valid (issue 49). In plain Lua
-- (the BLPOP path) and inside nginx (the worker's subscriber), for a lock,
-- a permit and a read lock (spec/workers/stale_handoff.lua), and with the
-- waiter's process stopped (SIGSTOP) while it blocks.
local helper = require "helper"
local core = require "redlock.core"
local nginx = require "openresty.nginx"
local stale = require "workers.stale_handoff"

local function check(out, kind)
    assert.is_true(out.paused, "the waiter was not paused")
    if kind == "lock" then assert.is_true(out.handed, "the release did not hand the waiter the lock") end
    if out.w_remaining then
        assert.is_false(out.w_remaining > 0 and out.x_remaining > 0, string.format(
            "two holders: the waiter's lock has %.0f ms left while the other's has %.0f", out.w_remaining,
            out.x_remaining))
    end
end

describe("a waiter paused past the ttl of the lock handed to it", function()
    local it = helper.needing(it, "script_time")
    local server, data
    setup(function()
        server = helper.start_server()
        data = core.conn(server:spec())
    end)
    teardown(function()
        if data then data:close() end
        helper.stop_all()
    end)

    for _, kind in ipairs { "lock", "permit", "reader" } do
        it("is not handed a " .. kind .. " that went on (plain Lua)", function()
            check(stale.run(server:url(), helper.key("stale"), kind, core.now), kind)
        end)
    end

    it("stopped while it blocks: its lock counts the pause, or it waits again", function()
        local key = helper.key("stale")
        local redlock = helper.redlock()
        -- (the holder's lock lasts until the waiter blocks, however slow the
        -- machine: released below)
        local h_client = redlock.new { servers = { server:url() }, ttl = 20000, fair = true }
        local h = assert(h_client:acquire(key))
        local w = helper.spawn("spec/workers/lock_worker.lua", "wait", server:url(), key, 10, 8000, "notify", 0,
            300)
        local pid
        assert(helper.eventually(20000, function()
            local f = io.open(w.dir .. "/out")
            pid = f and f:read("*a"):match("pid (%d+)")
            if f then f:close() end
            return pid
        end))
        -- blocked in BLPOP on its hand-off list
        assert(helper.eventually(20000, function()
            return (data:command("CLIENT", "LIST")):find("cmd=blpop", 1, true) ~= nil
        end))
        os.execute("kill -STOP " .. pid)
        local stopped = true
        local ok, err = pcall(function()
            assert(h:release())
            local x_client = redlock.new { servers = { server:url() } }
            local x, t_x
            assert(helper.eventually(3000, function()
                t_x = core.now()
                x = x_client:try_acquire(key, { ttl = 2500 })
                return x
            end), "the handed lock did not run out")
            local x_until = t_x + x:remaining() + (core.now() - t_x)
            os.execute("kill -CONT " .. pid)
            stopped = false
            local status, out = w:wait(10000)
            assert.equal(0, status, out)
            local t, valid = out:match("acquired ([%d.]+) fence %d+ valid ([%d.]+)")
            assert(t, out)
            assert.is_false(tonumber(valid) > 0 and tonumber(t) < x_until, out)
            x_client:close()
        end)
        if stopped then os.execute("kill -CONT " .. pid) end
        h_client:close()
        assert(ok, err)
    end)
end)

describe("inside nginx, a waiter paused past the ttl of the lock handed to it", function()
    local it = helper.needing(it, "script_time")
    local missing = nginx.missing()
    if not missing and ((os.getenv("REDLOCK_LUA") or "lua5.4") ~= "lua5.4" or os.getenv("REDLOCK_BUILD")) then
        missing = "nginx's specs run in the Lua 5.4 suite"
    end
    if missing then
        pending("skipped: " .. missing)
        return
    end
    local redis, ngx_server
    setup(function()
        redis = helper.start_server()
        ngx_server = nginx.start { workers = 1, redis = redis, lua_path = "@REPO@/spec/openresty/?.lua;@REPO@/spec/?.lua;",
            server = [[        location = /stale { content_by_lua_block { require("pause").stale() } }]] }
    end)
    teardown(function()
        if ngx_server then ngx_server:stop() end
        helper.stop_all()
    end)

    for _, kind in ipairs { "lock", "permit", "reader" } do
        it("is not handed a " .. kind .. " that went on", function()
            local body = ngx_server:get("/stale?key=" .. helper.key("stale") .. "&kind=" .. kind)
            local paused, handed, w, x = body:match("^(%S+) (%S+) (%S+) (%S+)")
            assert(paused, body)
            check({ paused = paused == "true", handed = handed == "true", w_remaining = tonumber(w) >= 0 and
                tonumber(w) or nil, x_remaining = tonumber(x) }, kind)
            assert.same({}, ngx_server:errors())
        end)
    end
end)
