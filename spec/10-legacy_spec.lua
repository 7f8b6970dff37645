-- Legacy mode (SETNX/GETSET timestamps, WATCH/MULTI/EXEC) and the choice of
-- mode, against real redis-servers whose scripting commands are renamed
-- away, so that any use of EVAL fails.
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"
local legacy = require "redlock.legacy"
local detect = require "redlock.detect"

local format, floor = string.format, math.floor
local unpack = table.unpack or unpack -- luacheck: ignore 143

local NOSCRIPT = {
    'rename-command EVAL ""', 'rename-command EVALSHA ""', 'rename-command SCRIPT ""',
    'rename-command FUNCTION ""', 'rename-command FCALL ""',
}

local function with(extra)
    local t = {}
    for _, l in ipairs(NOSCRIPT) do t[#t + 1] = l end
    for _, l in ipairs(extra) do t[#t + 1] = l end
    return t
end

local function wall() return floor(core.time()) end

-- A legacy value as another client would have written it.
local function value(expiry, token) return format("%d:%s", expiry, token or redlock.token()) end

local function esc(s) return (s:gsub("%p", "%%%0")) end

-- Wraps a client's connection so that `hook(name, ...)` runs just before
-- each command is sent: another real client can act between two commands.
local function intercept(client, hook)
    local server = client.servers[1]
    local real = server.conn
    server.conn = setmetatable({
        command = function(_, ...)
            hook(...)
            return real:command(...)
        end,
        -- (a step after WATCH: only on the connection open now)
        command_kept = function(_, ...)
            hook(...)
            return real:command_kept(...)
        end,
        eval = function(_, ...)
            hook("EVALSHA", ...)
            return real:eval(...)
        end,
        eval_values = function(_, ...)
            hook("EVALSHA", ...)
            return real:eval_values(...)
        end,
    }, { __index = function(_, k) return function(_, ...) return real[k](real, ...) end end })
    return function() server.conn = real end
end

describe("legacy mode", function()
    local noscript, plain, data, pdata
    local clients = {}

    local function new(server, opts)
        opts = opts or {}
        opts.servers = opts.servers or { server:url() }
        opts.retry_delay = opts.retry_delay or 10
        opts.retry_jitter = opts.retry_jitter or 5
        local c = redlock.new(opts)
        clients[#clients + 1] = c
        return c
    end

    setup(function()
        noscript = helper.start_server { config = NOSCRIPT }
        plain = helper.start_server()
        data = core.conn(noscript:spec())
        pdata = core.conn(plain:spec())
    end)
    teardown(function()
        for _, c in ipairs(clients) do c:close() end
        data:close()
        pdata:close()
        helper.stop_all()
    end)

    it("the test server refuses every scripting command", function()
        for _, cmd in ipairs { { "EVAL", "return 1", "0" }, { "EVALSHA", ("0"):rep(40), "0" },
            { "SCRIPT", "FLUSH" }, { "FUNCTION", "LIST" }, { "FCALL", "f", "0" } } do
            local r, err, code = data:command(unpack(cmd))
            assert.is_nil(r)
            assert.equal("server", code)
            assert.matches("unknown command", err)
        end
    end)

    for _, mode in ipairs { "legacy", "auto" } do
        describe("mode " .. mode .. " on a server without scripting", function()
            local client
            setup(function() client = new(noscript, { mode = mode }) end)

            -- The timestamp formats other clients write (issue 21), at an
            -- expiry in Unix ms: seed 004's plain ms, the SETNX example's
            -- plain seconds, ms with any suffix, ms with a token of ours.
            local others_token = redlock.token()
            local FORMATS = {
                { "plain ms", function(ms) return format("%d", ms) end },
                { "plain seconds", function(ms) return format("%d", floor(ms / 1000)) end },
                { "ms:anything", function(ms) return format("%d:deadbeef", ms) end },
                { "ms:<32 hex>", function(ms) return value(ms, others_token) end },
            }

            for _, f in ipairs(FORMATS) do
                it("takes over an expired " .. f[1] .. " lock without a ttl; respects a future one", function()
                    local key = helper.key()
                    data:command("SET", key, f[2](wall() - 5000))
                    local c = new(noscript, { mode = mode })
                    local lock = assert(c:try_acquire(key, { ttl = 5000 }))
                    assert.equal(lock.token, data:command("GET", key):match(":(%x+)$"))
                    local _, err, code = new(noscript, { mode = mode }):try_acquire(key)
                    assert.equal("locked", code, err)
                    assert.is_true(lock:release())
                    assert.equal(0, data:command("EXISTS", key))
                    -- 20 s ahead: held, and the wait reported is the timestamp's
                    local expiry = wall() + 20000
                    data:command("SET", key, f[2](expiry))
                    local none
                    none, err, code = c:try_acquire(key)
                    assert.is_nil(none)
                    assert.equal("locked", code)
                    local ms = tonumber(err:match("expires in (%d+) ms"))
                    assert.is_true(ms and ms > 18000 and ms <= 20000, err)
                    assert.equal(f[2](expiry), data:command("GET", key))
                    data:command("DEL", key)
                end)
            end

            -- (a ttl of 600 ms: a renewal every 200 ms, six round trips each
            -- on a server without scripting, late by up to 400 ms on a loaded host)
            it("with_lock (ttl 600) around a 1800 ms function keeps the lock: renewed, then gone", function()
                local key = helper.key()
                local c = new(noscript, { mode = mode })
                local other = new(noscript, { mode = mode })
                local seen
                local ok, r = c:with_lock(key, { ttl = helper.ms(600) }, function(lock)
                    helper.sleep(helper.ms(1200)) -- twice the ttl
                    local _, _, code = other:try_acquire(key)
                    seen = code
                    assert.equal(lock.token, data:command("GET", key):match(":(%x+)$"))
                    helper.sleep(helper.ms(600))
                    return "done"
                end)
                assert.is_true(ok, r)
                assert.equal("done", r)
                assert.equal("locked", seen)
                assert.equal(0, data:command("EXISTS", key))
            end)

            it("acquires as '<expiry ms>:<token>' with a server ttl, and releases", function()
                local key = helper.key()
                if mode == "auto" then assert.is_nil(client:mode()) end
                local before = wall()
                local lock = assert(client:acquire(key, { ttl = 5000 }))
                assert.equal("legacy", client:mode())
                local v = data:command("GET", key)
                local exp, tok = v:match("^(%d+):(%x+)$")
                assert.equal(lock.token, tok)
                exp = tonumber(exp)
                assert.is_true(exp >= before + 5000 and exp <= wall() + 5000, v)
                local pttl = helper.pttl(data, key)
                assert.is_true(pttl > 4000 and pttl <= 5000, "pttl " .. pttl)
                assert.is_true(lock:remaining() > 4000)
                assert.is_true(lock:release())
                assert.equal(0, data:command("EXISTS", key))
            end)

            it("try_acquire on a held key gives 'locked', naming the mode", function()
                local key = helper.key()
                local lock = assert(client:acquire(key, { ttl = 5000 }))
                local other, err, code = client:try_acquire(key)
                assert.is_nil(other)
                assert.equal("locked", code)
                assert.matches("^locked: '" .. esc(key) .. "' is held by another owner on 127%.0%.0%.1:%d+ "
                    .. "%(legacy mode%) %(expires in %d+ ms%)", err)
                assert.equal(lock.token, data:command("GET", key):match(":(%x+)$"))
                assert.is_true(lock:release())
            end)

            it("acquire waits for the holder's expiry, and times out when it lasts", function()
                local key = helper.key()
                assert(client:acquire(key, { ttl = 300 }))
                local t0 = core.now()
                local b = assert(client:acquire(key, { wait = 5000 }))
                local took = core.now() - t0
                assert.is_true(took >= 200 and took < 3000, "took " .. took)
                local _, err, code = client:acquire(key, { wait = 200 })
                assert.equal("timeout", code)
                assert.matches("^timeout: waited 200 ms", err)
                assert.is_true(b:release())
            end)

            it("extend writes a new expiry and a new server ttl", function()
                local key = helper.key()
                local lock = assert(client:acquire(key, { ttl = 1000 }))
                assert.is_true(lock:extend(20000))
                local exp = tonumber(data:command("GET", key):match("^(%d+):"))
                assert.is_true(exp > wall() + 19000)
                assert.is_true(helper.pttl(data, key) > 19000)
                assert.is_true(lock:remaining() > 19000)
                assert.is_true(lock:release())
                local ok, _, code = lock:extend()
                assert.is_nil(ok)
                assert.equal("not owner", code)
            end)

            it("with_lock runs fn under the lock and releases it, also when fn raises", function()
                local key = helper.key()
                local ok, a, b = client:with_lock(key, function(lock)
                    assert.equal(lock.token, data:command("GET", key):match(":(%x+)$"))
                    return "a", nil
                end)
                assert.is_true(ok)
                assert.equal("a", a)
                assert.is_nil(b)
                assert.equal(0, data:command("EXISTS", key))
                local okp, err = pcall(client.with_lock, client, key, function() error("boom", 0) end)
                assert.is_false(okp)
                assert.equal("boom", err)
                assert.equal(0, data:command("EXISTS", key))
            end)

            it("fences increase, on the server's one counter as in script mode", function()
                local key = helper.key()
                local last = 0
                for _ = 1, 5 do
                    local lock = assert(client:acquire(key))
                    assert.is_true(lock.fence > last)
                    last = lock.fence
                    assert.equal(string.format("%.0f", last), helper.last_fence(data))
                    lock:release()
                end
            end)
        end)
    end

    describe("auto", function()
        it("picks script mode on a normal server", function()
            helper.needs("set_px")
            local client = new(plain)
            assert.is_nil(client:mode())
            local key = helper.key()
            local lock = assert(client:acquire(key))
            assert.equal("script", client:mode())
            assert.equal(lock.token, pdata:command("GET", key))
            assert.is_true(lock:release())
        end)

        it("decides on the first use that reaches the server, not on a connection error", function()
            local srv = helper.start_server { config = NOSCRIPT }
            local client = new(srv)
            srv:stop()
            local _, err, code = client:acquire(helper.key(), { wait = 0 })
            assert.equal("connection", code)
            assert.matches("^connection: ", err)
            assert.is_nil(client:mode())
            srv:restart()
            local lock = assert(client:acquire(helper.key()))
            assert.equal("legacy", client:mode())
            assert.is_true(lock:release())
            srv:stop()
        end)

        it("a connection error after INFO decides nothing either (frozen server)", function()
            helper.needs("set_px")
            local srv = helper.start_server()
            local client = new(srv, { timeout = 200 })
            local key = helper.key()
            -- INFO answers; the server freezes before the script is sent
            local restore = intercept(client, function(name)
                if name == "INFO" then return end
                srv:freeze()
            end)
            local _, err, code = client:acquire(key, { wait = 0 })
            restore()
            srv:thaw()
            assert.equal("connection", code)
            assert.matches("timed out", err)
            assert.is_nil(client:mode())
            local lock = assert(client:acquire(key))
            assert.equal("script", client:mode())
            lock:release()
            srv:stop()
        end)

        it("a server error that is not a refusal decides nothing", function()
            helper.needs("set_px")
            local client = new(plain)
            local key = helper.key()
            -- (a key of another type is no server error: misuse, decided in
            -- the script; an out-of-memory refusal of the script is one)
            pdata:command("HSET", key, "f", "v")
            local _, err, code = client:try_acquire(key)
            assert.equal("misuse", code)
            assert.matches("holds a value of another kind", err)
            assert.is_nil(client:mode())
            local policy = pdata:command("CONFIG", "GET", "maxmemory-policy")[2]
            pdata:command("CONFIG", "SET", "maxmemory-policy", "noeviction")
            pdata:command("CONFIG", "SET", "maxmemory", "1")
            _, err, code = client:try_acquire(helper.key())
            pdata:command("CONFIG", "SET", "maxmemory", "0")
            pdata:command("CONFIG", "SET", "maxmemory-policy", policy)
            assert.equal("server", code)
            assert.matches("OOM", err)
            assert.is_nil(client:mode())
        end)

        it("each server of a client is detected on its own", function()
            local client = new(nil, { servers = { plain:url(), noscript:url() } })
            assert.is_nil(client:mode(1))
            assert.is_nil(client:mode(2))
            -- through one server's own operations, whatever the strategy
            local s2 = client.servers[2]
            local ok = s2:acquire(helper.key(), redlock.token(), 1000)
            assert.is_true(ok)
            assert.is_nil(client:mode(1))
            assert.equal("legacy", client:mode(2))
            assert.equal("legacy", client:mode(s2.name))
        end)
    end)

    describe("mode script", function()
        it("never falls back, and says why in the error", function()
            local client = new(noscript, { mode = "script" })
            local key = helper.key()
            local lock, err, code = client:acquire(key)
            assert.is_nil(lock)
            assert.equal("server", code)
            -- (Redis 4.0 and 5.0 quote the command `so`)
            assert.matches("^server: 127%.0%.0%.1:%d+: ERR unknown command ['`]EVALSHA['`] %(script mode: "
                .. "this server refuses scripting; use mode \"auto\" or \"legacy\"%) %(acquiring '"
                .. esc(key) .. "'%)$", err)
            assert.equal("script", client:mode())
            assert.equal(0, data:command("EXISTS", key))
        end)
    end)

    describe("mode legacy on a normal server", function()
        it("uses the legacy layout, and excludes script-mode clients both ways", function()
            helper.needs("set_px")
            local lc = new(plain, { mode = "legacy" })
            local sc = new(plain, { mode = "script" })
            local key = helper.key()
            local a = assert(lc:acquire(key))
            assert.equal("legacy", lc:mode())
            assert.matches("^%d+:" .. a.token .. "$", pdata:command("GET", key))
            local _, _, code = sc:try_acquire(key)
            assert.equal("locked", code)
            assert.is_true(a:release())
            local b = assert(sc:acquire(key))
            local _, err
            _, err, code = lc:try_acquire(key)
            assert.equal("locked", code)
            assert.matches("%(expires in %d+ ms%)", err)
            assert.equal(b.token, pdata:command("GET", key))
            assert.is_true(b:release())
        end)

        it("keeps fences monotonic when clients of both modes take turns", function()
            helper.needs("set_px")
            local lc = new(plain, { mode = "legacy" })
            local sc = new(plain, { mode = "script" })
            local key = helper.key()
            local last = 0
            for i = 1, 6 do
                local lock = assert((i % 2 == 0 and lc or sc):acquire(key))
                assert.is_true(lock.fence > last)
                last = lock.fence
                assert.is_true(lock:release())
            end
        end)
    end)

    describe("expiry by timestamp", function()
        local client
        setup(function() client = new(noscript, { mode = "legacy" }) end)

        it("takes over a lock left by a crashed holder, and sets a server ttl", function()
            local key = helper.key()
            local dead = value(wall() - 1000)
            data:command("SET", key, dead) -- no server ttl: only the timestamp says it expired
            local lock = assert(client:try_acquire(key, { ttl = 4000 }))
            assert.matches("^%d+:" .. lock.token .. "$", data:command("GET", key))
            local pttl = helper.pttl(data, key)
            assert.is_true(pttl > 3000 and pttl <= 4000)
            assert.is_true(lock:release())
        end)

        it("does not take over a live one", function()
            local key = helper.key()
            local live = value(wall() + 3000)
            data:command("SET", key, live)
            local _, err, code = client:try_acquire(key)
            assert.equal("locked", code)
            local ms = tonumber(err:match("expires in (%d+) ms"))
            assert.is_true(ms > 2000 and ms <= 3000, err)
            assert.equal(live, data:command("GET", key))
        end)

        it("waits for a live one to expire by its timestamp", function()
            local key = helper.key()
            data:command("SET", key, value(wall() + 300))
            local t0 = core.now()
            local lock = assert(client:acquire(key, { wait = 5000 }))
            local took = core.now() - t0
            assert.is_true(took >= 200 and took < 3000, "took " .. took)
            assert.is_true(lock:release())
        end)

        it("treats values that are no timestamp as held, never expired", function()
            -- (a decimal integer, alone or before ':', is a timestamp: see above)
            for _, v in ipairs { "someone-else", "x123", "-5", "12.5", "123abc", " 123", "123 ",
                ("1"):rep(17), ("7"):rep(32), redlock.token(), "" } do
                local key = helper.key()
                data:command("SET", key, v)
                local _, err, code = client:try_acquire(key)
                assert.equal("locked", code, v)
                assert.matches("never: no ttl", err)
                assert.equal(v, data:command("GET", key))
            end
            local key = helper.key()
            data:command("SETEX", key, "5", "plain-token") -- (SET PX: 2.6.12+)
            local _, err, code = client:try_acquire(key)
            assert.equal("locked", code)
            local ms = tonumber(err:match("expires in (%d+) ms"))
            assert.is_true(ms > 4000 and ms <= 5000, err)
        end)
    end)

    describe("ownership", function()
        local client, other
        setup(function()
            client = new(noscript, { mode = "legacy" })
            other = new(noscript, { mode = "legacy" })
        end)

        it("a holder whose lock expired and was taken over gets 'not owner'; the new value stays", function()
            local key = helper.key()
            local a = assert(client:acquire(key, { ttl = 10000 }))
            -- a's lock expires by its timestamp (and its server ttl is gone)
            data:command("SET", key, value(wall() - 1, a.token))
            local b = assert(other:try_acquire(key, { ttl = 10000 }))
            local bv = data:command("GET", key)
            assert.matches(":" .. b.token .. "$", bv)
            local ok, err, code = a:release()
            assert.is_nil(ok)
            assert.equal("not owner", code)
            assert.matches("^not owner: '" .. esc(key) .. "' is no longer held by this lock on "
                .. "127%.0%.0%.1:%d+ %(legacy mode%)", err)
            a.released = false -- try extend too, as if release had not been called
            local _
            ok, _, code = a:extend(10000)
            assert.is_nil(ok)
            assert.equal("not owner", code)
            assert.equal(bv, data:command("GET", key))
            assert.is_true(helper.pttl(data, key) > 9000)
            assert.is_true(b:release())
        end)

        it("after the server ttl removed it and another took it, the same", function()
            local key = helper.key()
            local a = assert(client:acquire(key, { ttl = 150 }))
            helper.sleep(300)
            local b = assert(other:try_acquire(key, { ttl = 10000 }))
            local _, _, code = a:extend()
            assert.equal("not owner", code)
            _, _, code = a:release()
            assert.equal("not owner", code)
            assert.is_true(b:release())
        end)

        it("does not delete or extend its own lock once its expiry has passed (seed 004)", function()
            local key = helper.key()
            local a = assert(client:acquire(key, { ttl = 10000 }))
            local expired = value(wall() - 1, a.token)
            data:command("SET", key, expired)
            local ok, _, code = a:extend()
            assert.is_nil(ok)
            assert.equal("not owner", code)
            a.released = false
            ok, _, code = a:release()
            assert.is_nil(ok)
            assert.equal("not owner", code)
            assert.equal(expired, data:command("GET", key))
        end)

        it("release of a key someone deleted is 'not owner' and leaves no key", function()
            local key = helper.key()
            local a = assert(client:acquire(key))
            data:command("DEL", key)
            local _, _, code = a:extend()
            assert.equal("not owner", code)
            assert.equal(0, data:command("EXISTS", key))
        end)

        it("a retry with the same token after a lost reply owns the lock again, with a new fence", function()
            local key = helper.key()
            local server = client.servers[1]
            local token = redlock.token()
            local ok, fence = legacy.acquire(server, key, token, 5000)
            assert.is_true(ok)
            local ok2, fence2 = legacy.acquire(server, key, token, 8000)
            assert.is_true(ok2)
            assert.is_true(fence2 > fence)
            assert.is_true(helper.pttl(data, key) > 7000)
            assert.is_true(legacy.release(server, key, token))
        end)
    end)

    describe("WATCH guards (a second client acts between two commands)", function()
        local client, other
        setup(function()
            client = new(noscript, { mode = "legacy" })
            other = new(noscript, { mode = "legacy" })
        end)

        it("of two contenders for the same expired lock, one wins and keeps it (C3/C4)", function()
            local key = helper.key()
            data:command("SET", key, value(wall() - 1000))
            local b
            -- client read the expired value; other takes over before client's MULTI
            local restore = intercept(client, function(name)
                if name == "MULTI" and not b then b = assert(other:try_acquire(key)) end
            end)
            local a, err, code = client:try_acquire(key)
            restore()
            assert.is_nil(a)
            assert.equal("locked", code, err)
            assert.matches(":" .. b.token .. "$", data:command("GET", key))
            assert.is_true(b:release())
        end)

        it("release: a nil EXEC re-checks; still ours, it deletes", function()
            local key = helper.key()
            local a = assert(client:acquire(key))
            local v, touched = data:command("GET", key), false
            local execs = 0
            local restore = intercept(client, function(name)
                if name == "MULTI" and not touched then
                    touched = true
                    data:command("SET", key, v) -- same value: touched, still ours
                end
                if name == "EXEC" then execs = execs + 1 end
            end)
            local ok = a:release()
            restore()
            assert.is_true(ok)
            assert.equal(2, execs)
            assert.equal(0, data:command("EXISTS", key))
        end)

        it("release: taken over between GET and EXEC, it is 'not owner' and deletes nothing", function()
            local key = helper.key()
            local a = assert(client:acquire(key))
            local theirs = value(wall() + 60000)
            local restore = intercept(client, function(name)
                if name == "MULTI" then data:command("SET", key, theirs) end
            end)
            local ok, _, code = a:release()
            restore()
            assert.is_nil(ok)
            assert.equal("not owner", code)
            assert.equal(theirs, data:command("GET", key))
        end)

        it("extend: taken over between GET and EXEC, it is 'not owner' and writes nothing", function()
            local key = helper.key()
            local a = assert(client:acquire(key))
            local theirs = value(wall() + 60000)
            local restore = intercept(client, function(name)
                if name == "MULTI" then data:command("SETEX", key, "60", theirs) end
            end)
            local ok, _, code = a:extend(5000)
            restore()
            assert.is_nil(ok)
            assert.equal("not owner", code)
            assert.equal(theirs, data:command("GET", key))
            assert.is_true(helper.pttl(data, key) > 50000)
        end)

        it("a key that keeps changing ends a release with a 'server' error, not a guess", function()
            local key = helper.key()
            local a = assert(client:acquire(key))
            local v = data:command("GET", key)
            local restore = intercept(client, function(name)
                if name == "MULTI" then data:command("SET", key, v) end
            end)
            local ok, err, code = a:release()
            restore()
            assert.is_nil(ok)
            assert.equal("server", code)
            assert.matches("kept changing while releasing", err)
            assert.matches("%(legacy mode%)", err)
            assert.is_true(a:release())
        end)

        it("a connection lost inside a transaction is an error, and nothing is left half-done", function()
            helper.needs("client_kill_type")
            local key = helper.key()
            local a = assert(client:acquire(key))
            local restore = intercept(client, function(name)
                if name == "DEL" then data:command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes") end
            end)
            local ok, err, code = a:release()
            restore()
            assert.is_nil(ok)
            assert.equal("connection", code)
            assert.matches("%(legacy mode%)", err)
            assert.equal(1, data:command("EXISTS", key))
            assert.is_true(a:release())
        end)
    end)

    describe("the safety net", function()
        it("every legacy write carries a server ttl", function()
            local client = new(noscript, { mode = "legacy" })
            local key = helper.key()
            local lock = assert(client:acquire(key, { ttl = 3000 }))
            local pttl = helper.pttl(data, key)
            assert.is_true(pttl > 0 and pttl <= 3000)
            assert.is_true(lock:extend(6000))
            pttl = helper.pttl(data, key)
            assert.is_true(pttl > 5000 and pttl <= 6000)
            assert.is_true(lock:release())
        end)

        it("uses EXPIRE rounded up where PEXPIRE is missing", function()
            -- (on 2.4, which has neither, the renames are left out)
            local srv = helper.start_server { config = with {
                'rename-command PEXPIRE ""', 'rename-command PTTL ""' } }
            local d = core.conn(srv:spec())
            local client = new(srv)
            local key = helper.key()
            local lock = assert(client:acquire(key, { ttl = 1500 }))
            assert.equal("legacy", client:mode())
            assert.equal(2, d:command("TTL", key))
            assert.is_true(lock:extend(2100))
            assert.equal(3, d:command("TTL", key))
            d:command("SETEX", key .. "x", "5", "foreign")
            local _, err, code = client:try_acquire(key .. "x")
            assert.equal("locked", code)
            assert.matches("expires in 5000 ms", err)
            assert.is_true(lock:release())
            d:close()
            srv:stop()
        end)
    end)

    describe("without WATCH (the bare recipe)", function()
        local srv, d, client, other
        setup(function()
            srv = helper.start_server { config = with { 'rename-command WATCH ""' } }
            d = core.conn(srv:spec())
            client = new(srv)
            other = new(srv, { mode = "legacy" })
        end)
        teardown(function() d:close() end)

        it("acquires, extends, releases, with a server ttl", function()
            local key = helper.key()
            local lock = assert(client:acquire(key, { ttl = 3000 }))
            assert.equal("legacy", client:mode())
            assert.is_false(client.servers[1].caps.watch)
            assert.matches("^%d+:" .. lock.token .. "$", d:command("GET", key))
            assert.is_true(helper.pttl(d, key) > 2000)
            local _, _, code = other:try_acquire(key)
            assert.equal("locked", code)
            assert.is_true(lock:extend(8000))
            assert.is_true(helper.pttl(d, key) > 7000)
            assert.is_true(lock:release())
            assert.equal(0, d:command("EXISTS", key))
        end)

        it("takes over an expired lock by GETSET; the old holder is 'not owner'", function()
            local key = helper.key()
            local a = assert(client:acquire(key))
            d:command("SET", key, value(wall() - 1, a.token))
            local b = assert(other:try_acquire(key, { ttl = 5000 }))
            assert.is_true(helper.pttl(d, key) > 4000)
            local _, _, code = a:release()
            assert.equal("not owner", code)
            assert.matches(":" .. b.token .. "$", d:command("GET", key))
            assert.is_true(b:release())
        end)

        it("a retry with the same token owns the lock again, with a new fence", function()
            local key = helper.key()
            local server = client.servers[1]
            local token = redlock.token()
            local ok, fence = legacy.acquire(server, key, token, 5000)
            assert.is_true(ok)
            local ok2, fence2 = legacy.acquire(server, key, token, 8000)
            assert.is_true(ok2)
            assert.is_true(fence2 > fence)
            assert.is_true(helper.pttl(d, key) > 7000)
            assert.is_true(legacy.release(server, key, token))
        end)

        it("a loser puts back the winner's value its GETSET displaced", function()
            local key = helper.key()
            d:command("SET", key, value(wall() - 1000))
            local b
            local restore = intercept(client, function(name)
                if name == "GETSET" and not b then b = assert(other:try_acquire(key, { ttl = 5000 })) end
            end)
            local a, _, code = client:try_acquire(key)
            restore()
            assert.is_nil(a)
            assert.equal("locked", code)
            assert.matches(":" .. b.token .. "$", d:command("GET", key))
            assert.is_true(helper.pttl(d, key) > 3000)
            assert.is_true(b:release())
        end)
    end)

    describe("detection helpers", function()
        it("reads the version from INFO", function()
            assert.equal(20612, legacy.parse_version("# Server\r\nredis_version:2.6.12\r\n"))
            assert.equal(20417, legacy.parse_version("redis_git_sha1:0\r\nredis_version:2.4.17\r\n"))
            assert.equal(70015, legacy.parse_version("redis_version:7.0.15\r\n"))
            assert.is_nil(legacy.parse_version("# Server\r\n"))
        end)

        it("tells a refusal of scripting from a passing error", function()
            for _, e in ipairs {
                "server: h:1: ERR unknown command 'EVALSHA', with args beginning with: 'x'",
                "server: h:1: ERR unknown command 'EVAL'",
                "server: h:1: NOSCRIPT No matching script. Please use EVAL.",
                "server: h:1: ERR command is disabled",
                "server: h:1: ERR scripting is disabled in this instance",
                "server: h:1: NOPERM User locker has no permissions to run the 'script|load' command",
                "server: h:1: NOPERM this user has no permissions to run the 'evalsha' command",
                "server: h:1: NOPERM User locker has no permissions to run the 'evalsha' command",
                "server: h:1: ERR unknown command `EVALSHA`, with args beginning with: ",
            } do assert.is_true(detect.refused(e), e) end
            for _, e in ipairs {
                "server: h:1: BUSY Redis is busy running a script. You can only call SCRIPT KILL"
                    .. " or SHUTDOWN NOSAVE.",
                -- a failed RDB save (stop-writes-on-bgsave-error), as Redis
                -- 7 says it to EVALSHA (spec/13-detect_spec.lua)
                "server: h:1: MISCONF Redis is configured to save RDB snapshots, but it's currently"
                    .. " unable to persist to disk. Commands that may modify the data set are disabled,"
                    .. " because this instance is configured to report errors during writes if RDB"
                    .. " snapshotting fails (stop-writes-on-bgsave-error option). Please check the Redis"
                    .. " logs for details about the RDB error. script: 0123abcd, on @user_script:1.",
                "server: h:1: LOADING Redis is loading the dataset in memory",
                "server: h:1: READONLY You can't write against a read only replica.",
                "server: h:1: WRONGTYPE Operation against a key holding the wrong kind of value",
                "server: h:1: NOPERM this user has no permissions to access one of the keys",
                -- who we are is no scripting refusal (spec/13-detect_spec.lua)
                "server: h:1: AUTH failed: WRONGPASS invalid username-password pair or user is disabled.",
                "server: h:1: AUTH failed: ERR invalid password",
                "server: h:1: NOAUTH Authentication required.",
                "server: h:1: SELECT failed: ERR DB index is out of range",
                "server: h:1: ERR unknown command 'FOO'",
                "connection: h:1: could not connect (Connection refused)",
            } do assert.is_false(detect.refused(e), e) end
        end)
    end)

    describe("client:mode()", function()
        it("takes an index or a server name, raises on anything else", function()
            local client = new(noscript)
            assert.is_nil(client:mode(1))
            assert.is_nil(client:mode(client.servers[1].name))
            assert.has_error(function() client:mode(2) end, "bad argument #1 to 'mode' (no server 2)")
            assert.has_error(function() client:mode("nowhere:1") end)
            assert.has_error(function() client:mode({}) end,
                "bad argument #1 to 'mode' (number or string expected, got table)")
            client:close()
            local v, err, code = client:mode()
            assert.is_nil(v)
            assert.matches("^closed", err)
            assert.equal("closed", code)
        end)
    end)
end)
