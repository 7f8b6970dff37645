-- Semaphores, readers and writers, and group locks inside nginx (Debian's nginx with the Lua
-- module), over cosockets: the same API as plain Lua. Needs the core built
-- for LuaJIT (`make build-jit`); runs in the Lua 5.4 suite only, as
-- spec/41 does.
local helper = require "helper"
local core = require "redlock.core"
local nginx = require "openresty.nginx"

local missing = nginx.missing()
if not missing and ((os.getenv("REDLOCK_LUA") or "lua5.4") ~= "lua5.4" or os.getenv("REDLOCK_BUILD")) then
    missing = "nginx's specs run in the Lua 5.4 suite"
end

local SERVER = [[
        location = /sem { content_by_lua_block { require("kinds").sem() } }
        location = /sem_wait { content_by_lua_block { require("kinds").sem_wait() } }
        location = /sem_hold { content_by_lua_block { require("kinds").sem_hold() } }
        location = /pair { content_by_lua_block { require("kinds").pair() } }
        location = /rw { content_by_lua_block { require("kinds").rw() } }]]

describe("semaphores and group locks inside nginx", function()
    -- (the kinds\' scripts read the server\'s clock: Redis 3.2+)
    local it = helper.needing(it, "script_time")
    if missing then
        pending("skipped: " .. missing)
        return
    end
    local redis, data, ngx_server
    setup(function()
        assert(io.open("build/jit/redlock/core.so"), "build/jit/redlock/core.so is missing: run `make build-jit`")
            :close()
        redis = helper.start_server()
        data = core.conn(redis:spec())
        ngx_server = nginx.start { workers = 4, redis = redis, server = SERVER,
            lua_path = "@REPO@/spec/openresty/?.lua;" }
    end)
    teardown(function()
        if ngx_server then ngx_server:stop() end
        if data then data:close() end
        helper.stop_all()
    end)

    -- n requests to url_of(i), 16 at a time; returns their bodies
    local function requests(n, url_of)
        local paths = {}
        for i = 1, n do paths[i] = url_of(i) end
        local codes, bodies = ngx_server:parallel(paths, 16)
        for i = 1, n do
            local body = (bodies[i] or ""):gsub("%s+$", "")
            assert.equal("200", codes[i], "request " .. i .. " answered: " .. body)
            bodies[i] = body
        end
        return bodies
    end

    it("limit 3 over 4 workers: 60 requests, never more than 3 inside, more than 1 seen", function()
        local key = helper.key("sem")
        local most = 0
        for _, body in ipairs(requests(60, function() return "/sem?key=" .. key .. "&limit=3&ms=20" end)) do
            most = math.max(most, tonumber(body))
        end
        assert.is_true(most <= 3, "inside at once: " .. most)
        assert.is_true(most > 1, "never more than one inside")
        assert.equal("0", data:command("GET", key .. ":inside"))
        assert.equal(0, data:command("EXISTS", key))
        assert.same({}, ngx_server:errors())
    end)

    it("a permit given back wakes a waiting request through the worker's subscriber", function()
        local key = helper.key("sem")
        local holder = ngx_server:bg("/sem_hold?key=" .. key .. "&ms=1500")
        assert(helper.eventually(5000, function() return data:command("EXISTS", key) == 1 end))
        -- the worker's first waiter starts its subscriber
        local body = ngx_server:get("/sem_wait?key=" .. key .. "&wait=50")
        assert.matches("^timeout", body)
        -- polling would sleep 10 s: only the release's wake-up lets it in
        local waiter = ngx_server:bg("/sem_wait?key=" .. key .. "&wait=5000&hold=1500")
        assert.equal("released", (holder.wait()))
        assert(helper.eventually(1000, function() return data:command("EXISTS", key) == 1 end))
        assert.equal("taken", (waiter.wait()))
        assert.same({}, ngx_server:errors())
    end)

    it("readers and writers over 4 workers: readers overlap, a writer never overlaps anyone", function()
        local key = helper.key("rw")
        local most = 0
        for _, body in ipairs(requests(80, function(i)
            return "/rw?key=" .. key .. "&role=" .. (i % 8 == 0 and "w" or "r") .. "&ms=15"
        end)) do
            assert.not_equal("overlap", body)
            most = math.max(most, tonumber(body))
        end
        assert.is_true(most > 1, "readers never overlapped")
        assert.equal(0, data:command("EXISTS", key))
        assert.same({}, ngx_server:errors())
    end)

    it("group locks: 100 requests on random pairs of 4 keys lose no update", function()
        local keys = {}
        for i = 1, 4 do keys[i] = helper.key("g" .. i) end
        local seed = tonumber(core.token():sub(1, 6), 16)
        local times, pairs_of = {}, {}
        for i = 1, 100 do
            local a = (seed + i * 7) % 4 + 1
            local b = (a + (i % 3)) % 4 + 1
            pairs_of[i] = { keys[a], keys[b] }
            times[a] = (times[a] or 0) + 1
            times[b] = (times[b] or 0) + 1
        end
        for _, body in ipairs(requests(100, function(i)
            return "/pair?a=" .. pairs_of[i][1] .. "&b=" .. pairs_of[i][2]
        end)) do
            assert.equal("ok", body)
        end
        for i, k in ipairs(keys) do
            assert.equal(tostring(times[i] or 0), tostring(data:command("GET", k .. ":counter")))
            assert.equal(0, data:command("EXISTS", k))
        end
        assert.same({}, ngx_server:errors())
    end)
end)
