-- The redlock command with --limit (a semaphore) and --key (a group lock),
-- as real processes against a real redis-server.
local helper = require "helper"

describe("redlock command: --limit and --key", function()
    -- (the kinds\' scripts read the server\'s clock: Redis 3.2+)
    local it = helper.needing(it, "script_time")
    local server, data
    setup(function()
        local client
        server, client, data = helper.single_server()
        client:close()
    end)
    teardown(function()
        data:close()
        helper.stop_all()
    end)

    -- runs bin/redlock in the background; wait() gives "rc=N" and the output
    local function bg(command, ...)
        return helper.spawn("bin/redlock", command, "--server", server:url(), ...)
    end
    local function run(...)
        local status, out = bg(...):wait(60000)
        return status, out
    end

    it("--limit 2: two commands run at once, the third waits; status shows permits and waiters", function()
        local key = helper.key("pool")
        local cmds = {}
        for i = 1, 3 do cmds[i] = bg("run", "--limit", "2", "--wait", "20s", key, "--", "sleep", "1") end
        assert(helper.eventually(10000, function()
            return data:command("ZCARD", key) == 3 and data:command("ZCARD", "{" .. key .. "}:waiters") == 1
        end), "two permits and one waiter")
        local status, out = run("status", key)
        assert.equal(0, status, out)
        assert.matches("permits server=%S+ limit=2 held=2 waiters=1 fence=%d+", out)
        local n = 0
        for _ in out:gmatch("\n  permit token=%x+ remaining_ms=%d+") do n = n + 1 end
        assert.equal(2, n, out)
        status, out = run("try", "--limit", "3", key, "--", "true")
        assert.equal(64, status, out)
        assert.matches("misuse:", out)
        for i = 1, 3 do
            status, out = cmds[i]:wait(30000)
            assert.equal(0, status, out)
        end
        assert.equal(0, data:command("EXISTS", key))
        status = run("status", key)
        assert.equal(1, status)
    end)

    it("--shared: readers run together, a writer alone; status shows the readers", function()
        local key = helper.key("rw")
        local readers = {}
        -- the readers hold until the test says so (a file): the later reader's try comes first
        local go = helper.fresh_dir("rw") .. "/go"
        for i = 1, 2 do
            readers[i] = bg("run", "--shared", key, "--", "sh", "-c",
                "while [ ! -e " .. helper.quote(go) .. " ]; do sleep 0.05; done")
        end
        assert(helper.eventually(10000, function() return data:command("ZCARD", key) == 3 end))
        local writer = bg("run", "--wait", "20s", key, "--", "sh", "-c", 'echo "writer $REDLOCK_FENCE"')
        assert(helper.eventually(10000, function()
            return data:command("ZCARD", "{" .. key .. "}:waiters") == 1
        end), "the writer waits")
        local status, out = run("status", key)
        assert.equal(0, status, out)
        assert.matches("readers server=%S+ held=2 waiters=1 fence=%d+", out)
        -- a later reader stays out while the writer waits
        status, out = run("try", "--shared", key, "--", "true")
        assert.equal(1, status, out)
        assert(io.open(go, "w")):close()
        for i = 1, 2 do assert.equal(0, (readers[i]:wait(30000))) end
        status, out = writer:wait(30000)
        assert.equal(0, status, out)
        assert.matches("writer %d+", out)
        assert.equal(0, data:command("EXISTS", key))
        assert.equal(64, (run("run", "--shared", "--limit", "2", key, "--", "true")))
    end)

    it("--key a --key b: a group lock; CMD sees its keys and fences; a single lock of a key is refused",
        function()
            local a, b = helper.key("a"), helper.key("b")
            local cmd = bg("run", "--key", a, "--key", b, "--", "sh", "-c",
                'echo "keys=$REDLOCK_KEYS"; echo "fences=$REDLOCK_FENCES"; sleep 1')
            assert(helper.eventually(10000, function() return data:command("EXISTS", b) == 1 end))
            local status, out = run("try", a, "--", "true")
            assert.equal(1, status, out)
            status, out = run("status", "--key", a, "--key", b)
            assert.equal(0, status, out)
            assert.matches("key=" .. a:gsub("%p", "%%%0") .. " held", out)
            status, out = cmd:wait(30000)
            assert.equal(0, status, out)
            assert.matches("keys=" .. a:gsub("%p", "%%%0") .. "\n" .. b:gsub("%p", "%%%0") .. "\n", out)
            assert.matches("fences=%d+\n%d+\n", out)
            assert.equal(0, data:command("EXISTS", a))
            -- by token: acquire, extend, release of the group
            status, out = run("acquire", "--key", a, "--key", b)
            assert.equal(0, status, out)
            local token = out:match("%x+")
            assert.equal(0, (run("extend", "--key", a, "--key", b, token)))
            assert.equal(0, (run("release", "--key", a, "--key", b, token)))
            assert.equal(1, (run("release", "--key", a, "--key", b, token)))
            assert.equal(64, (run("run", "--key", a, "--key", a, "--", "true")))
            assert.equal(64, (run("run", "--limit", "2", "--key", a, "--key", b, "--", "true")))
        end)
end)

describe("redlock command: --key and --limit over several servers (Redlock)", function()
    local servers, urls = {}, {}
    setup(function()
        for i = 1, 3 do
            servers[i] = helper.start_server()
            urls[#urls + 1] = "--server"
            urls[#urls + 1] = servers[i]:url()
        end
    end)
    teardown(function() helper.stop_all() end)

    local function run(command, ...)
        local args = { command }
        for _, u in ipairs(urls) do args[#args + 1] = u end
        for _, a in ipairs({ ... }) do args[#args + 1] = a end
        return helper.spawn("bin/redlock", (table.unpack or unpack)(args)):wait(60000)
    end

    it("a group's extend and release by token use the group's quorum; --limit is bad usage", function()
        local a, b = helper.key("ga"), helper.key("gb")
        local status, out = run("try", "--ttl", "30000", "--key", a, "--key", b)
        assert.equal(0, status, out)
        local token = out:match("%x+")
        status, out = run("extend", "--key", a, "--key", b, token)
        assert.equal(0, status, out)
        status, out = run("release", "--key", a, "--key", b, token)
        assert.equal(0, status, out)
        for i = 1, 3 do assert.equal("0", (servers[i]:cli("EXISTS", a, b):gsub("%s", ""))) end
        status, out = run("release", "--key", a, "--key", b, token)
        assert.equal(1, status, out)
        assert.equal(64, (run("release", "--limit", "2", a, token)))
        assert.equal(64, (run("acquire", "--limit", "2", a)))
    end)
end)
