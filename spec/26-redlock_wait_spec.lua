-- Redlock's acquire within its wait when an attempt reaches no majority
-- because servers failed (not because another owner holds the key): the
-- attempt takes back what it got, and acquire tries again after
-- retry_delay plus jitter until the deadline; then `no quorum` naming each
-- server and what it said. try_acquire and wait = 0 answer at once. A
-- release tries the servers that failed again, within a bound.
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

    it("each attempt has a token of its own: a take-back that reaches a server after the next attempt's grant"
        .. " there deletes nothing that attempt counted", function()
        -- server 3 behind a proxy that holds back what is sent on a
        -- connection (a network that delays it), here the attempt's
        -- request and the take-back on the new connection after it
        local proxy = helper.start_hold_proxy(servers[3], 1)
        -- (busted keeps one finally per test)
        finally(function()
            proxy.stop()
            heal()
        end)
        local c = redlock.new { servers = { urls[1], urls[2], proxy.url() }, retry_delay = 20, retry_jitter = 0,
            server_backoff = 0, server_timeout = 200 }
        clients[#clients + 1] = c
        assert(c:try_acquire(helper.key("warm"))):release()
        local key = helper.key()
        servers[1]:kill()
        proxy.hold()
        -- the first attempt: server 1 down, server 3's answer held back: no
        -- majority; its take-back on server 3 (a new connection) held back
        -- too; the next attempt gets through
        local lock, err = c:acquire(key, { wait = 10000, ttl = 30000 })
        assert.is_truthy(lock, err)
        assert.equal(lock.token, data[3]:command("GET", key))
        -- the network delivers the first attempt's request, then its take-back
        assert.equal(2, proxy.release())
        assert.equal(lock.token, data[3]:command("GET", key))
        assert.equal(lock.token, data[2]:command("GET", key))
        -- so no other client gets a majority while the lock is held
        servers[1]:restart()
        local other = new_client()
        local taken, why, code = other:try_acquire(key)
        assert.is_nil(taken)
        assert.equal("locked", code, why)
        assert.is_true(lock:remaining() > 0)
        assert.is_true(lock:release())
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

    it("an attempt that the caller's own pause (a hook) made slower than the validity gives no lock, fenced or not",
        function()
            finally(heal)
            local name1
            -- the hook runs inside the attempt, after the answers came
            local function hook(ev)
                if ev.type == "server_error" and ev.server == name1 then helper.sleep(300) end
            end
            local c = new_client { on_event = hook, server_backoff = 0 }
            name1 = c.servers[1].name
            servers[1]:kill()
            for _, fence in ipairs { false, true } do
                local key = helper.key()
                local lock, err, code = c:try_acquire(key, { ttl = 200, fence = fence })
                assert.is_nil(lock, "a lock with " .. (lock and lock:remaining() or 0) .. " ms left")
                assert.equal("no quorum", code, err)
                assert.matches("^no quorum: the attempt took %d+ ms, more than the validity of a 200 ms ttl", err)
                for i = 2, N do assert.equal(0, data[i]:command("EXISTS", key)) end
            end
        end)

    describe("a release", function()
        -- the server_error events of a release about server `name`
        local function errors_about(seen, name)
            local n = 0
            for _, ev in ipairs(seen) do
                if ev.type == "server_error" and ev.server == name then n = n + 1 end
            end
            return n
        end

        it("whose majority does not answer in time asks those servers again, and releases", function()
            -- servers 2 and 3 behind proxies that hold back what the
            -- connections open now carry (the release's first requests)
            local p2, p3 = helper.start_hold_proxy(servers[2], 0), helper.start_hold_proxy(servers[3], 0)
            -- (busted keeps one finally per test)
            finally(function()
                p2.stop()
                p3.stop()
                heal()
            end)
            local hook, seen = recorder()
            local c = redlock.new { servers = { urls[1], p2.url(), p3.url() }, retry_delay = 20,
                retry_jitter = 20, server_timeout = 300, on_event = hook }
            clients[#clients + 1] = c
            local key = helper.key()
            local lock = assert(c:acquire(key, { ttl = 30000 }))
            p2.hold()
            p3.hold()
            assert.is_true(lock:release())
            -- the first attempt failed on both, the second released there
            assert.equal(1, errors_about(seen, c.servers[2].name))
            assert.equal(1, errors_about(seen, c.servers[3].name))
            assert.equal("released", seen[#seen].type)
            for i = 1, N do assert.equal(0, data[i]:command("EXISTS", key)) end
            assert.equal(2, p2.release() + p3.release())
        end)

        it("counts a server whose late first request deleted the key as released, not as not owner", function()
            finally(heal)
            local record, seen = recorder()
            local c
            -- a frozen server comes back once the release found it so: its
            -- first request runs then, and the next one finds nothing
            local function hook(ev)
                record(ev)
                for i = 2, 3 do
                    if ev.type == "server_error" and ev.server == c.servers[i].name then servers[i]:thaw() end
                end
            end
            c = new_client { on_event = hook, seen = seen }
            local key = helper.key()
            local lock = assert(c:acquire(key, { ttl = 30000 }))
            servers[2]:freeze()
            servers[3]:freeze()
            local ok, err = lock:release()
            assert.is_true(ok, err)
            assert.equal(1, errors_about(seen, c.servers[2].name))
            assert.equal("released", seen[#seen].type)
            for i = 1, N do assert.equal(0, data[i]:command("EXISTS", key)) end
        end)

        it("ends after 3 attempts: no quorum naming each server; after its validity, at the first", function()
            finally(heal)
            local hook, seen = recorder()
            local c = new_client { on_event = hook, seen = seen }
            local lock = assert(c:acquire(helper.key(), { ttl = 30000 }))
            servers[2]:freeze()
            servers[3]:freeze()
            local ok, err, code = lock:release()
            assert.is_nil(ok)
            assert.equal("no quorum", code, err)
            assert.matches("^no quorum: released on 1 of 3 servers, 2 needed %(", err)
            assert.matches(c.servers[1].name .. ": released", err, 1, true)
            for i = 2, 3 do
                assert.matches(c.servers[i].name .. ": [^;]*timed out after %d+ ms", err)
                assert.equal(3, errors_about(seen, c.servers[i].name))
            end
            assert.matches("%), 3 attempts %(releasing '.-'%)$", err)
            heal()
            -- a lock whose validity has ended: one attempt
            for i = #seen, 1, -1 do seen[i] = nil end
            local short = assert(c:acquire(helper.key(), { ttl = 200 }))
            assert.is_true(helper.eventually(5000, function() return short:remaining() == 0 end))
            servers[2]:freeze()
            servers[3]:freeze()
            ok, err, code = short:release()
            assert.is_nil(ok)
            assert.equal("no quorum", code, err)
            assert.matches("%) %(releasing '.-'%)$", err)
            assert.equal(1, errors_about(seen, c.servers[2].name))
        end)
    end)
end)

-- Notified waiting over several masters (issue 48): a waiter joins the
-- queue of each server that refuses it and blocks on one of them; the
-- holder's release, on every server, wakes it there. A waiter that has
-- waited the bound keeps a free key from newcomers on every server.
describe("Redlock over 3 servers: notified waiting", function()
    local it = helper.needing(it, "script_time")
    local notify = require "redlock.notify"
    local quorum = require "redlock.quorum"
    local servers, urls, data = {}, {}, {}
    setup(function()
        for i = 1, N do
            servers[i] = helper.start_server()
            urls[i] = servers[i]:url()
            data[i] = core.conn(servers[i]:spec())
        end
    end)
    teardown(function()
        for i = 1, N do data[i]:close() end
        helper.stop_all()
    end)

    local function blocked()
        local n = 0
        for i = 1, N do
            for line in data[i]:command("CLIENT", "LIST"):gmatch("[^\n]+") do
                if line:find("cmd=blpop", 1, true) and line:find("flags=b", 1, true) then n = n + 1 end
            end
        end
        return n
    end

    it("a waiter blocks and the release wakes it: it gets the lock with a minute's retry_delay", function()
        -- (its blocks last 100 ms at most: polled where BLPOP takes whole seconds)
        helper.needs("blpop_ms")
        local c = redlock.new { servers = urls }
        local key = helper.key("woken")
        local lock = assert(c:acquire(key, { ttl = 30000 }))
        local w = helper.spawn("spec/workers/redlock_waiter.lua", table.concat(urls, ","), key, 8000, 20000)
        assert.is_true(helper.eventually(5000, function() return blocked() == 1 end), "no waiter in BLPOP")
        for i = 1, N do assert.equal(1, data[i]:command("ZCARD", notify.waiters_key(key))) end
        assert.is_true(lock:release())
        local status, out = w:wait(20000)
        assert.equal(0, status, out)
        local fence = tonumber(out:match("acquired (%d+)"))
        assert.truthy(fence, out)
        assert.is_true(fence > lock.fence)
        for i = 1, N do assert.equal(0, data[i]:command("EXISTS", key, notify.waiters_key(key))) end
        c:close()
    end)

    -- A waiter's refused attempt on every server (this process, token):
    -- queued on each; then until every server's clock says it has waited
    -- longer than notify.BARGE_MS.
    local function queue(c, key, token)
        local ok = quorum.acquire(c, key, token, 10000, "5000", nil, false, nil, nil, notify.BARGE_MS)
        assert.is_false(ok)
    end
    local function grow_old(key, token)
        for i = 1, N do
            local since = tonumber(data[i]:command("ZSCORE", notify.waiters_key(key), token))
            assert.is_true(helper.server_clock_past(data[i], tonumber(notify.BARGE_MS) * 1000, since))
        end
    end

    it("a waiter over the bound is passed over by no newcomer: the free key is its own on every server", function()
        local c = redlock.new { servers = urls }
        local key, token = helper.key("old"), redlock.token()
        local lock = assert(c:acquire(key))
        queue(c, key, token)
        grow_old(key, token)
        assert.is_true(lock:release())
        for i = 1, N do assert.equal(0, data[i]:command("EXISTS", key)) end
        local _, _, code = c:try_acquire(key)
        assert.equal("locked", code)
        _, _, code = c:acquire(key, { wait = 100 })
        assert.equal("timeout", code)
        local ok, fence = quorum.acquire(c, key, token, 10000, "5000", nil, false, nil, nil, notify.BARGE_MS)
        assert.is_true(ok)
        assert.is_true(fence > lock.fence)
        assert.is_true((quorum.release(c, key, token)))
        c:close()
    end)

    it("a waiter's next attempt, with a token of its own, keeps the place of the last one", function()
        local c = redlock.new { servers = urls }
        local key, first, second = helper.key("place"), redlock.token(), redlock.token()
        local lock = assert(c:acquire(key))
        queue(c, key, first)
        local was = {}
        for i = 1, N do was[i] = data[i]:command("ZSCORE", notify.waiters_key(key), first) end
        assert.is_false((quorum.acquire(c, key, second, 10000, "5000", nil, false, nil, nil, notify.BARGE_MS,
            { prev = first })))
        for i = 1, N do
            assert.equal(was[i], data[i]:command("ZSCORE", notify.waiters_key(key), second))
            assert.equal(core.null, data[i]:command("ZSCORE", notify.waiters_key(key), first))
            assert.equal(1, data[i]:command("ZCARD", notify.waiters_key(key)))
        end
        assert.is_nil(quorum.give_up(c, key, second))
        assert.is_true(lock:release())
        c:close()
    end)

    it("a waiter that takes the lock on a majority leaves the queue of the server that refused it", function()
        local c = redlock.new { servers = urls }
        local key, token = helper.key("left"), redlock.token()
        data[3]:command("SET", key, "another", "PX", "60000")
        local ok = quorum.acquire(c, key, token, 10000, "5000", nil, false, nil, nil, notify.BARGE_MS)
        assert.is_true(ok)
        assert.equal(0, data[3]:command("EXISTS", notify.waiters_key(key)))
        assert.is_true((quorum.release(c, key, token)))
        data[3]:command("DEL", key)
        c:close()
    end)

    it("a newcomer is refused a free key that a live waiter past the bound queues for behind one that died",
        function()
            local c = redlock.new { servers = urls }
            local key, token = helper.key("dead-front"), redlock.token()
            local lock = assert(c:acquire(key))
            queue(c, key, token)
            grow_old(key, token)
            assert.is_true(lock:release())
            for i = 1, N do
                -- at the front, a waiter that no longer counts as waiting (its
                -- place lasted until 1 ms after the epoch)
                data[i]:command("ZADD", notify.waiters_key(key), 1, "dead")
                data[i]:command("HSET", notify.data_key(key), "dead", "1 0 4")
            end
            local _, _, code = c:try_acquire(key)
            assert.equal("locked", code)
            for i = 1, N do assert.equal(core.null, data[i]:command("ZSCORE", notify.waiters_key(key), "dead")) end
            assert.is_nil(quorum.give_up(c, key, token))
            c:close()
        end)

    -- The attempts of one caller share a table of its own (redlock.lua's
    -- retry): another caller of the same client (inside nginx, another
    -- request) does not change where it waits.
    it("a waiter blocks on the server its own attempt queued it on, whatever other callers did since", function()
        helper.needs("blpop_ms")
        local c = redlock.new { servers = urls }
        local key, token, place = helper.key("own-wait"), redlock.token(), {}
        local lock = assert(c:acquire(key))
        assert.is_false((quorum.acquire(c, key, token, 10000, "5000", nil, false, nil, nil, notify.BARGE_MS,
            place)))
        local other = assert(c:acquire(helper.key("other")))
        assert.is_true(quorum.wait(c, key, 50, core.now(), nil, false, token, place))
        assert.is_true(other:release())
        assert.is_nil(quorum.give_up(c, key, token))
        assert.is_true(lock:release())
        c:close()
    end)

    it("a hand-off's element on a waiter's list is only a wake-up: no lock on one server's word", function()
        helper.needs("blpop_ms")
        local c = redlock.new { servers = urls }
        local key, token, place = helper.key("element"), redlock.token(), {}
        local lock = assert(c:acquire(key))
        assert.is_false((quorum.acquire(c, key, token, 10000, "5000", nil, false, nil, nil, notify.BARGE_MS,
            place)))
        for i = 1, N do data[i]:command("RPUSH", notify.handoff_key(key, token), "5 1234") end
        assert.is_true(quorum.wait(c, key, 5000, core.now(), nil, false, token, place))
        assert.is_nil(quorum.give_up(c, key, token))
        assert.is_true(lock:release())
        c:close()
    end)

    -- Three waiters, each queued first on one server and the others the
    -- bound or more behind it there (each server's own clock orders them),
    -- whose attempts overlap (every grant before any take-back), at the
    -- level of the scripts with the arguments redlock.quorum sends (the
    -- bound, the last attempt's token, the caller's score): without one
    -- order on every server, each server grants its own front, each waiter
    -- gets one server, a grant takes it off that server's queue, the
    -- fronts rotate and the votes split round after round.
    it("of three waiters whose places differ between servers, one gets a majority of the free key", function()
        local key = helper.key("cycle")
        local names = { "a", "b", "c" }
        local tok, place = {}, {}
        for _, name in ipairs(names) do tok[name], place[name] = redlock.token(), {} end
        local all = {}
        for i = 1, N do all[i] = i end
        -- one attempt on server i (token, the caller's place table): granted, and its place there
        local function attempt(i, token, p)
            local r = data[i]:command("EVAL", core.scripts.acquire.source, 5, key, notify.waiters_key(key),
                notify.data_key(key), notify.handoff_key(key, token), COUNTER, token, "10000", "100", "o",
                quorum.trail(p.prev, p.score))
            return r[1] == 1, r[4]
        end
        local function take_back(i, token)
            local r = data[i]:command("EVAL", core.scripts.release.source, 2, key, notify.waiters_key(key), token)
            if r == 2 then
                r = data[i]:command("EVAL", core.scripts.release.source, 5, key, notify.waiters_key(key),
                    notify.data_key(key), notify.wake_key(key), COUNTER, token, notify.handoff_prefix(key))
            end
            return r
        end
        -- until every server's clock is twice the bound past now
        local function pass_bound()
            for i = 1, N do
                assert.is_true(helper.server_clock_past(data[i], 2 * tonumber(notify.BARGE_MS) * 1000))
            end
        end
        for i = 1, N do data[i]:command("SET", key, "holder", "PX", "60000") end
        -- server 1 queues a, b, c; server 2 b, c, a; server 3 c, a, b: the
        -- first refused attempt of each, its score from the places it got
        local places = { a = {}, b = {}, c = {} }
        for i = 1, N do
            for k = 0, 2 do
                local name = names[(i - 1 + k) % 3 + 1]
                local granted, at = attempt(i, tok[name], place[name])
                assert.is_false(granted)
                places[name][i] = at
                pass_bound()
            end
        end
        for _, name in ipairs(names) do
            place[name].score = quorum.place_of(all, { false, false, false }, places[name], 2)
        end
        for i = 1, N do assert.equal(3, take_back(i, "holder")) end
        local won, rounds = nil, {}
        for _ = 1, 6 do
            local got, next_tok = { a = {}, b = {}, c = {} }, {}
            for _, name in ipairs(names) do
                next_tok[name] = redlock.token()
                place[name].prev = tok[name]
                for i = 1, N do
                    if attempt(i, next_tok[name], place[name]) then got[name][#got[name] + 1] = i end
                end
            end
            for _, name in ipairs(names) do
                if #got[name] >= 2 then won = name end
            end
            rounds[#rounds + 1] = string.format("a %s, b %s, c %s", table.concat(got.a, ","),
                table.concat(got.b, ","), table.concat(got.c, ","))
            if won then break end
            for _, name in ipairs(names) do
                for _, i in ipairs(got[name]) do take_back(i, next_tok[name]) end
                tok[name] = next_tok[name]
            end
            for i = 1, N do assert.equal(0, data[i]:command("EXISTS", key)) end
            pass_bound()
        end
        assert.truthy(won, "six rounds, the key free on every server, and no waiter got a majority"
            .. " (the servers each granted: " .. table.concat(rounds, "; ") .. ")")
        assert.equal("b", won) -- (the places' medians order b, c, a)
    end)

    it("under the bound a newcomer takes the free key, with fair = true too", function()
        local c = redlock.new { servers = urls }
        local key, token = helper.key("young"), redlock.token()
        local was = notify.BARGE_MS
        notify.BARGE_MS = "600000"
        local ok, err = pcall(function()
            local lock = assert(c:acquire(key))
            queue(c, key, token)
            assert.is_true(lock:release())
            lock = assert(c:try_acquire(key, { fair = true }))
            assert.is_true(lock:release())
        end)
        notify.BARGE_MS = was
        assert(ok, err)
        assert.is_nil(quorum.give_up(c, key, token))
        for i = 1, N do assert.equal(0, data[i]:command("EXISTS", key, notify.waiters_key(key))) end
        c:close()
    end)
end)
