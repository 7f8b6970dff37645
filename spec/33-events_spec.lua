-- Events and metrics (issue 25): opts.on_event and client:stats().
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"
local util = require "redlock.util"

-- A hook that keeps every event, and the list it fills.
local function recorder()
    local seen = {}
    return function(ev) seen[#seen + 1] = ev end, seen
end

local function types(seen)
    local out = {}
    for i, ev in ipairs(seen) do out[i] = ev.type end
    return out
end

local function find(seen, type)
    for _, ev in ipairs(seen) do
        if ev.type == type then return ev end
    end
end

describe("events and stats on one server", function()
    local server, client, data

    setup(function() server, client, data = helper.single_server() end)
    teardown(function() helper.close_all(client, data) end)

    it("acquired, refused, timeout, extended, released and not_owner, with their fields", function()
        local key = helper.key()
        local hook, seen = recorder()
        local c = redlock.new{ servers = { server:url() }, retry_delay = 10, retry_jitter = 5, on_event = hook }
        local lock = assert(c:acquire(key, { ttl = 5000 }))
        assert.is_nil(c:try_acquire(key))
        assert.is_nil(c:acquire(key, { wait = 30 }))
        assert.is_true(lock:extend())
        assert.is_true(lock:release())
        assert.is_nil(lock:release())
        assert.same({ "acquired", "refused", "timeout", "extended", "released", "not_owner" }, types(seen))
        local name = c.servers[1].name
        for _, ev in ipairs(seen) do
            assert.equal(util.show_key(key), ev.key)
            assert.equal(name, ev.server)
            assert.same({ name }, ev.servers)
        end
        local acquired, refused, timeout = seen[1], seen[2], seen[3]
        assert.equal(1, acquired.attempts)
        assert.equal(lock.fence, acquired.fence)
        assert.is_number(acquired.waited)
        assert.is_nil(acquired.err)
        assert.equal(1, refused.attempts)
        assert.equal("locked", refused.code)
        assert.matches("^locked: ", refused.err)
        assert.equal("timeout", timeout.code)
        assert.is_true(timeout.attempts >= 2, "attempts " .. timeout.attempts)
        assert.is_true(timeout.waited >= 30, "waited " .. timeout.waited)
        assert.equal(lock.fence, seen[4].fence)
        assert.equal("not owner", seen[6].code)
        local st = c:stats()
        assert.equal(1, st.acquired)
        assert.equal(1, st.refused)
        assert.equal(1, st.timeout)
        assert.equal(1, st.extended)
        assert.equal(1, st.released)
        assert.equal(1, st.not_owner)
        assert.equal(3, st.wait.count)
        assert.equal(3, st.wait.buckets[#st.wait.buckets].count)
        assert.equal(math.huge, st.wait.buckets[#st.wait.buckets].le)
        assert.is_true(st.wait.max >= 30 and st.wait.sum >= st.wait.max)
        c:close()
    end)

    it("a release by a non-owner (the key was taken over): not_owner, and lost once", function()
        local key = helper.key()
        local hook, seen = recorder()
        local lock = assert(client:acquire(key, { ttl = 5000, on_event = hook }))
        data:command("SET", key, "someone else")
        local ok, err, code = lock:release()
        assert.is_nil(ok)
        assert.equal("not owner", code, err)
        assert.same({ "acquired", "lost", "not_owner" }, types(seen))
        assert.equal("gone", seen[2].err)
        assert.equal(lock.fence, seen[3].fence)
        data:command("DEL", key)
    end)

    it("a call's on_event replaces the client's for that lock", function()
        local key = helper.key()
        local h1, s1 = recorder()
        local h2, s2 = recorder()
        local c = redlock.new{ servers = { server:url() }, on_event = h1 }
        local lock = assert(c:acquire(key, { on_event = h2 }))
        assert.is_true(lock:release())
        assert.same({}, types(s1))
        assert.same({ "acquired", "released" }, types(s2))
        c:close()
    end)

    it("a hook that raises breaks nothing: the operation completes, the error is counted", function()
        local key = helper.key()
        local c = redlock.new{ servers = { server:url() }, on_event = function() error("hook bug") end }
        local ok, v = c:with_lock(key, function(lock) return lock.fence end)
        assert.is_true(ok)
        assert.is_number(v)
        assert.equal(0, data:command("EXISTS", key))
        local st = c:stats()
        assert.equal(2, st.hook_errors)
        assert.equal(1, st.acquired)
        assert.equal(1, st.released)
        c:close()
    end)

    it("a lost lock: the renewal finds the token gone, lost tells it once with the reason", function()
        local key = helper.key()
        local hook, seen = recorder()
        local lock = assert(client:acquire(key, { ttl = helper.ms(300), renew = true, on_event = hook }))
        data:command("SET", key, "someone else")
        assert.is_true(helper.eventually(helper.ms(3000), function() return (lock:lost()) end))
        lock:lost()
        local ev = find(seen, "lost")
        assert.is_table(ev)
        assert.equal("gone", ev.err)
        assert.equal(util.show_key(key), ev.key)
        local n = 0
        for _, e in ipairs(seen) do if e.type == "lost" then n = n + 1 end end
        assert.equal(1, n)
        assert.is_nil(lock:release())
        data:command("DEL", key)
    end)

    it("stats(true) returns the counts and zeroes them", function()
        local c = redlock.new{ servers = { server:url() } }
        assert(c:with_lock(helper.key(), function() end))
        local st = c:stats(true)
        assert.equal(1, st.acquired)
        local st2 = c:stats()
        assert.equal(0, st2.acquired)
        assert.equal(0, st2.wait.count)
        assert.equal(0, st2.wait.buckets[#st2.wait.buckets].count)
        assert.has_error(function() c:stats("yes") end)
        c:close()
    end)

    it("stats() totals match the operations of a contended run over three clients", function()
        local key = helper.key()
        local url = server:url()
        local a = redlock.new{ servers = { url }, retry_delay = 5, retry_jitter = 0 }
        local b = redlock.new{ servers = { url }, retry_delay = 5, retry_jitter = 0 }
        local c = redlock.new{ servers = { url }, retry_delay = 5, retry_jitter = 0 }
        local rounds = 5
        for _ = 1, rounds do
            assert(a:with_lock(key, function()
                assert.is_nil(b:try_acquire(key))
                assert.is_nil(c:acquire(key, { wait = 15 }))
            end))
            local lock = assert(b:acquire(key, { wait = 1000 }))
            assert.is_nil(c:try_acquire(key))
            assert(lock:release())
        end
        local sa, sb, sc = a:stats(), b:stats(), c:stats()
        assert.equal(rounds, sa.acquired)
        assert.equal(rounds, sa.released)
        assert.equal(rounds, sb.acquired)
        assert.equal(rounds, sb.refused)
        assert.equal(rounds, sb.released)
        assert.equal(rounds, sc.timeout)
        assert.equal(rounds, sc.refused)
        assert.equal(0, sc.acquired)
        assert.equal(rounds, sa.wait.count)
        assert.equal(2 * rounds, sb.wait.count)
        assert.equal(2 * rounds, sc.wait.count)
        assert.is_true(sc.wait.max >= 15)
        for _, x in ipairs{ a, b, c } do x:close() end
    end)
end)

describe("events of a renewal that fails (server frozen)", function()
    local server, client, data

    setup(function() server, client, data = helper.single_server() end)
    teardown(function()
        server:thaw()
        helper.close_all(client, data)
    end)

    it("renewed while the server answers, renew_failed while it is frozen, then lost", function()
        local key = helper.key()
        local hook, seen = recorder()
        local c = redlock.new{ servers = { server:url() }, timeout = 100, on_event = hook }
        local lock = assert(c:acquire(key, { ttl = helper.ms(1500), renew = true }))
        assert.is_true(helper.eventually(helper.ms(3000), function()
            lock:lost()
            return find(seen, "renewed") ~= nil
        end))
        server:freeze()
        local ok, err = pcall(function()
            -- (lock:lost() may say so from its own clock before the thread
            -- marks it: the event comes with the thread's finding)
            assert.is_true(helper.eventually(helper.ms(5000), function()
                lock:lost()
                return find(seen, "lost") ~= nil
            end))
        end)
        server:thaw()
        assert(ok, err)
        lock:lost()
        local failed = find(seen, "renew_failed")
        assert.is_table(failed)
        assert.is_true(failed.attempts >= 1)
        assert.is_string(failed.err)
        local lost = find(seen, "lost")
        assert.is_table(lost)
        assert.equal("expired", lost.err)
        assert.equal(1, c:stats().lost)
        assert.is_true(c:stats().renewed >= 1)
        c:close()
    end)
end)

describe("events of a Redlock over three servers", function()
    local servers, urls = {}, {}

    setup(function()
        for i = 1, 3 do
            servers[i] = helper.start_server()
            urls[i] = servers[i]:url()
        end
    end)
    teardown(function() helper.stop_all() end)

    it("one server down: server_error names it, the lock is acquired; two down: quorum_failed", function()
        local hook, seen = recorder()
        local c = redlock.new{ servers = urls, server_timeout = 200, server_backoff = 0, on_event = hook }
        local down = c.servers[3].name
        servers[3]:kill()
        local key = helper.key()
        local lock = assert(c:acquire(key))
        assert.same({ "server_error", "acquired" }, types(seen))
        assert.equal(down, seen[1].server)
        assert.equal("connection", seen[1].code)
        assert.equal(util.show_key(key), seen[1].key)
        assert.same(c.names, seen[2].servers)
        assert.is_nil(seen[2].server)
        assert.equal(lock.fence, seen[2].fence)
        assert(lock:release())
        -- the release's too: the server that failed, then the release
        assert.same({ "server_error", "acquired", "server_error", "released" }, types(seen))
        assert.equal(down, seen[3].server)
        servers[2]:kill()
        seen[#seen + 1] = false -- a mark: what follows is the second attempt
        local ok, err, code = c:try_acquire(helper.key())
        assert.is_nil(ok)
        assert.equal("no quorum", code, err)
        local after = {}
        local marked = false
        for _, ev in ipairs(seen) do
            if ev == false then marked = true elseif marked then after[#after + 1] = ev end
        end
        assert.same({ "server_error", "server_error", "quorum_failed" }, types(after))
        local st = c:stats()
        assert.equal(1, st.quorum_failed)
        assert.equal(3, st.servers[down].errors)
        assert.equal(1, st.servers[c.servers[2].name].errors)
        assert.equal(0, st.servers[c.servers[1].name].errors)
        c:close()
        assert.is_true(core.now() > 0)
    end)
end)
