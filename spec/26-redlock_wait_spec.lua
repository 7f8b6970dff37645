-- Redlock's acquire within its wait when an attempt reaches no majority
-- because servers failed (not because another owner holds the key): the
-- attempt takes back what it got, and acquire tries again after
-- retry_delay plus jitter until the deadline; then `no quorum` naming each
-- server and what it said. try_acquire and wait = 0 answer at once.
-- (Orders of events only, never durations.)
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"

local N = 3
local COUNTER = "redlock:fences" -- the one library-wide key a server keeps

describe("Redlock over 3 servers: a wait over failed servers", function()
    local servers, urls, data = {}, {}, {}
    local clients = {}

    -- A hook that keeps every event, and the list it fills.
    local function recorder()
        local seen = {}
        return function(ev) seen[#seen + 1] = ev end, seen
    end

    -- A client over the 3 servers, its connections opened (so that a frozen
    -- server times out a request, not a connect).
    local function new_client(extra)
        local opts = { servers = urls, retry_delay = 20, retry_jitter = 20, server_backoff = 200,
                       server_timeout = 300 }
        for k, v in pairs(extra or {}) do
            if k ~= "seen" then opts[k] = v end
        end
        local c = redlock.new(opts)
        clients[#clients + 1] = c
        assert(c:try_acquire(helper.key("warm"))):release()
        local seen = extra and extra.seen
        if seen then
            for i = #seen, 1, -1 do seen[i] = nil end
        end
        return c
    end

    -- The keys a server holds, but for the fence counter.
    local function left(i)
        local out = {}
        for _, k in ipairs(data[i]:command("KEYS", "*")) do
            if k ~= COUNTER then out[#out + 1] = k end
        end
        return out
    end

    -- Brings back every server a test killed or froze.
    local function heal() helper.heal(servers, data) end

    -- The index of the first event of type (and about server, if given) in
    -- seen, or nil.
    local function first(seen, type, server)
        for i, ev in ipairs(seen) do
            if ev.type == type and (server == nil or ev.server == server) then return i end
        end
    end

    setup(function()
        for i = 1, N do
            servers[i] = helper.start_server()
            urls[i] = servers[i]:url()
            data[i] = core.conn(servers[i]:spec())
        end
    end)
    after_each(function()
        for _, c in ipairs(clients) do c:close() end
        clients = {}
    end)
    teardown(function()
        for i = 1, N do data[i]:close() end
        helper.stop_all()
    end)

    it("acquire tries again after a first attempt without a majority, and gets the lock once a server is back",
        function()
            finally(heal)
            local record, seen = recorder()
            local name1, name2
            -- server 2 comes back once an attempt has found it frozen,
            -- while the acquire waits
            local function hook(ev)
                record(ev)
                if ev.type == "server_error" and ev.server == name2 then servers[2]:thaw() end
            end
            local c = new_client { on_event = hook, seen = seen }
            name1, name2 = c.servers[1].name, c.servers[2].name
            local key = helper.key()
            servers[1]:kill()
            servers[2]:freeze()
            local lock, err = c:acquire(key, { wait = 10000 })
            assert.is_truthy(lock, err)
            -- first the failures, each server named; then the lock, after more than one attempt
            local down, slow, got = first(seen, "server_error", name1), first(seen, "server_error", name2),
                first(seen, "acquired")
            assert.is_truthy(down and slow and got)
            assert.is_true(down < got and slow < got)
            assert.equal("connection", seen[down].code)
            assert.matches("timed out", seen[slow].err, 1, true)
            assert.equal(#seen, got)
            assert.is_true(seen[got].attempts >= 2)
            assert.is_nil(first(seen, "quorum_failed"))
            -- a majority holds it: servers 2 and 3
            assert.equal(lock.token, data[2]:command("GET", key))
            assert.equal(lock.token, data[3]:command("GET", key))
            assert.is_true(lock:release())
            for i = 2, N do assert.same({}, left(i)) end
        end)

    it("try_acquire and wait = 0 answer after one attempt: no quorum, nothing left", function()
        finally(heal)
        local hook, seen = recorder()
        local c = new_client { on_event = hook, seen = seen }
        local key = helper.key()
        servers[1]:kill()
        servers[2]:freeze()
        for _, call in ipairs { function() return c:try_acquire(key, { ttl = 2000 }) end,
                                function() return c:acquire(key, { wait = 0, ttl = 2000 }) end } do
            local lock, err, code = call()
            assert.is_nil(lock)
            assert.equal("no quorum", code, err)
            assert.matches("^no quorum: granted by 1 of 3 servers, 2 needed %(", err)
            assert.matches("%(acquiring '.-'%)$", err)
            local ended = seen[#seen]
            assert.equal("quorum_failed", ended.type)
            assert.equal(1, ended.attempts)
            assert.same({}, left(3))
        end
        servers[2]:thaw()
        -- what the frozen server got late was taken back, or ends with its ttl
        data[2]:close()
        data[2] = core.conn(servers[2]:spec())
        assert.is_true(helper.eventually(5000, function() return #left(2) == 0 end))
    end)

    it("at the deadline: no quorum naming each failing server and why, after several attempts; nothing left",
        function()
            finally(heal)
            local hook, seen = recorder()
            local c = new_client { on_event = hook, seen = seen }
            local key = helper.key()
            servers[1]:kill()
            servers[2]:freeze()
            local lock, err, code = c:acquire(key, { wait = 3000, ttl = 2000 })
            assert.is_nil(lock)
            assert.equal("no quorum", code, err)
            assert.matches("^no quorum: granted by 1 of 3 servers, 2 needed %(", err)
            local name1, name2, name3 = c.servers[1].name, c.servers[2].name, c.servers[3].name
            -- each server and what it said: a refused connection, a server
            -- that does not answer (said so even while it is skipped)
            assert.matches(name1 .. ": [^;]*could not connect", err)
            assert.matches(name2 .. ": [^;]*timed out after %d+ ms", err)
            assert.matches(name3 .. ": granted", err, 1, true)
            local attempts = tonumber(err:match("%(acquiring '.-', waited 3000 ms, (%d+) attempts%)$"))
            assert.is_truthy(attempts, err)
            assert.is_true(attempts >= 2, err)
            local ended = seen[#seen]
            assert.equal("quorum_failed", ended.type)
            assert.equal("no quorum", ended.code)
            assert.equal(attempts, ended.attempts)
            -- every attempt took back what it got
            assert.same({}, left(3))
            servers[2]:thaw()
            data[2]:close()
            data[2] = core.conn(servers[2]:spec())
            assert.is_true(helper.eventually(5000, function() return #left(2) == 0 end))
        end)

    it("a key another owner holds on a majority still waits as before: timeout, not no quorum", function()
        finally(heal)
        local key = helper.key()
        for i = 1, 2 do data[i]:command("SET", key, "someone-else", "PX", 5000) end
        local c = new_client()
        local lock, err, code = c:acquire(key, { wait = 200 })
        assert.is_nil(lock)
        assert.equal("timeout", code, err)
        assert.matches("^timeout: waited 200 ms for '.-', held by another owner on 2 of 3 servers", err)
        assert.same({}, left(3))
    end)

    it("split votes with a failed server: the timeout names the failure of the last attempt", function()
        finally(heal)
        local key = helper.key()
        data[1]:command("SET", key, "someone-else", "PX", 5000)
        local c = new_client()
        servers[2]:kill()
        local lock, err, code = c:acquire(key, { wait = 200 })
        assert.is_nil(lock)
        assert.equal("timeout", code, err)
        assert.matches("^timeout: waited 200 ms for '.-', held by another owner on 1 of 3 servers", err)
        assert.matches("%(the last attempt: no quorum: granted by 1 of 3 servers, 2 needed %(", err)
        assert.matches(c.servers[2].name .. ": [^;]*could not connect", err)
        assert.same({}, left(3))
    end)
end)
