-- What each server version gives, as docs/versions.md's table says: the
-- mode auto picks, where fences come from, notified waiting and the
-- hand-off, WAIT and WAITAOF, ACL users. The server-matrix suite
-- (tools/test-servers.sh) runs it against every server build; the unit
-- suite against the redis-server on PATH.
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"

local WORKER = "spec/workers/lock_worker.lua"

local version = helper.server_version()
local n = version.number
local SCRIPTS = n >= 20612 -- SET NX PX: auto picks script mode
local SCRIPT_TIME = n >= 30200 -- TIME in scripts (effects replication)

describe("what " .. version.name .. " gives", function()
    local server, data, clients

    setup(function()
        server = helper.start_server()
        data = core.conn(server:spec())
        clients = {}
    end)
    teardown(function()
        for _, c in ipairs(clients) do c:close() end
        data:close()
        helper.stop_all()
    end)

    local function new(opts)
        opts = opts or {}
        opts.servers = opts.servers or { server:url() }
        local c = redlock.new(opts)
        clients[#clients + 1] = c
        return c
    end

    -- How many clients are blocked in BLPOP now.
    local function blocked()
        local count = 0
        for line in data:command("CLIENT", "LIST"):gmatch("[^\n]+") do
            if line:find("cmd=blpop", 1, true) and line:find("flags=b", 1, true) then count = count + 1 end
        end
        return count
    end

    it("auto picks legacy mode before 2.6.12 (no SET NX PX), script mode from it", function()
        local client = new()
        local lock = assert(client:acquire(helper.key()))
        assert.equal(SCRIPTS and "script" or "legacy", client:mode())
        assert.is_true(lock:release())
    end)

    it("fences come from the server's clock where the scripts (3.2+) or legacy mode (2.6+) read TIME, "
        .. "else from the counter alone", function()
        local client = new()
        local last = 0
        for _ = 1, 3 do
            local lock = assert(client:acquire(helper.key()))
            assert.is_true(lock.fence > last)
            last = lock.fence
            assert.is_true(lock:release())
        end
        -- the clock's fences are ms since 2026-01-01 x 100, far above a
        -- counter that started on this fresh server
        local clock = SCRIPT_TIME or (not SCRIPTS and n >= 20600)
        if clock then
            assert.is_true(last > 1e11, "fence " .. last)
        else
            assert.is_true(last < 1e6, "fence " .. last)
        end
    end)

    it("notified waiting: a waiter blocks in BLPOP in script mode (whole seconds before 6.0), and from 3.2 "
        .. "the release hands it the lock; legacy mode polls", function()
        local client = new()
        local key = helper.key()
        -- (fair: handed however short the waiter's wait so far)
        local lock = assert(client:acquire(key, { ttl = 10000, fair = true }))
        -- (retry_delay 2000: a waiter that polled would be seen polling)
        local worker = helper.spawn(WORKER, "wait", server:url(), key, 2000, 8000, "notify", 200)
        local waiter
        if SCRIPTS then
            assert.is_true(helper.eventually(5000, function() return blocked() == 1 end), "no waiter in BLPOP")
            waiter = data:command("ZRANGE", "{" .. key .. "}:waiters", 0, 0)[1]
            assert.truthy(waiter, "no waiter queued")
        else
            helper.sleep(300)
            assert.equal(0, blocked())
        end
        assert.is_true(lock:release())
        if SCRIPT_TIME then
            -- handed over in the release's own step: the key holds the waiter's token
            assert.equal(waiter, data:command("GET", key))
        end
        local status, out = worker:wait()
        assert.equal(0, status, out)
        assert.truthy(out:find("acquired", 1, true), out)
    end)

    it("WAIT (replicas, Redis 3.0+): without replicas the lock fails closed; before 3.0 a server error names "
        .. "WAIT; legacy mode refuses replicas; the mode stays", function()
        local client = new { replicas = 1, replica_timeout = 50 }
        local key = helper.key()
        local lock, err, code = client:acquire(key)
        assert.is_nil(lock)
        if not SCRIPTS then
            assert.equal("server", code)
            assert.truthy(err:find("need script mode", 1, true), err)
        elseif n >= 30000 then
            assert.equal("replicas", code)
            assert.truthy(err:find("0 of 1 replicas acknowledged", 1, true), err)
        else
            assert.equal("server", code)
            assert.truthy(err:find("WAIT needs Redis 3.0+", 1, true), err)
        end
        assert.equal(0, data:command("EXISTS", key))
        -- a refused WAIT is no refusal of scripting: auto stays decided
        assert.equal(SCRIPTS and "script" or "legacy", client:mode())
        lock = assert(client:acquire(key, { replicas = 0 }))
        assert.is_true(lock:release())
    end)

    it("WAITAOF (aof, Redis 7.2+): a master without appendonly refuses it; before 7.2 a server error says "
        .. "WAITAOF needs 7.2+; the mode stays", function()
        local client = new { aof = true, replica_timeout = 50 }
        local key = helper.key()
        local lock, err, code = client:acquire(key)
        assert.is_nil(lock)
        assert.equal("server", code)
        if not SCRIPTS then
            assert.truthy(err:find("need script mode", 1, true), err)
        elseif n >= 70200 then
            assert.truthy(err:find("appendonly", 1, true), err)
            assert.is_nil(err:find("refuses scripting", 1, true), err)
        else
            assert.truthy(err:find("WAITAOF needs Redis 7.2+", 1, true), err)
        end
        assert.equal(0, data:command("EXISTS", key))
        assert.equal(SCRIPTS and "script" or "legacy", client:mode())
        lock = assert(client:acquire(key, { aof = false }))
        assert.is_true(lock:release())
    end)

    it("ACL users (Redis 6.0+) lock with a username", function()
        helper.needs("acl")
        local acl = helper.start_server { config = { "user locker on >locker-secret-pw ~* +@all" } }
        local client = new { servers = { { host = "127.0.0.1", port = acl.port, username = "locker",
            password = "locker-secret-pw" } } }
        local lock = assert(client:acquire(helper.key()))
        assert.is_true(lock:release())
    end)
end)
