-- Mode "auto": only a refusal of scripting decides legacy mode (never a
-- wrong password, a disabled user, a connection error), and a server found
-- without scripting is asked again on a new connection. Against real
-- redis-servers: passwords changed with CONFIG SET, ACL users without
-- +@scripting, EVAL renamed away and back.
local helper = require "helper"
local redlock = require "redlock"
local now = require("redlock.core").now

local format, match = string.format, string.match

-- Waits until f() is true, at most ms (polling every 20 ms); asserts it
-- became true. (An observed event, never a fixed sleep against a ttl.)
local function wait_until(ms, what, f)
    local deadline = now() + ms
    while not f() do
        assert(now() < deadline, "gave up waiting: " .. what)
        helper.sleep(20)
    end
end

-- Waits until the client's renewal thread has renewed a lock n more times.
local function renewals(client, n)
    local base = client:stats().renewed
    wait_until(10000, n .. " renewals", function() return client:stats().renewed >= base + n end)
end

local NOSCRIPT = {
    'rename-command EVAL ""', 'rename-command EVALSHA ""', 'rename-command SCRIPT ""',
    'rename-command FUNCTION ""', 'rename-command FCALL ""',
}

-- What the server answers a wrong password: WRONGPASS from Redis 6.0 (the
-- ACL), "ERR invalid password" before.
local WRONG_PASSWORD = helper.lacks("acl") and "ERR invalid password" or "WRONGPASS"

-- The mode auto gives a server that takes the password: script from Redis
-- 2.6.12 (SET NX PX), legacy before.
local DETECTED = helper.lacks("set_px") and "legacy" or "script"

-- Whether the value of key is a legacy one ("<expiry ms>:<token>").
local function legacy_value(srv, key) return match(srv:cli("GET", key), "^%d+:%x+$") ~= nil end

describe("mode auto", function()
    teardown(helper.stop_all)

    describe("a wrong password", function()
        local srv
        before_each(function() srv = helper.start_server { password = "right" } end)
        after_each(function() srv:stop() end)

        it("decides nothing, and once the server takes it the client detects its mode (scripts)", function()
            local client = redlock.new { servers = { format("redis://:wrong@127.0.0.1:%d", srv.port) } }
            local key = helper.key()
            for _ = 1, 2 do
                local lock, err, code = client:try_acquire(key)
                assert.is_nil(lock)
                assert.equal("server", code)
                assert.matches(WRONG_PASSWORD, err, 1, true)
                assert.not_matches("legacy", err)
                assert.not_matches("wrong", err) -- never the password
                assert.is_nil(client:mode())
            end
            assert.equal("OK", srv:cli("CONFIG", "SET", "requirepass", "wrong"))
            srv.password = "wrong"
            local lock = assert(client:try_acquire(key))
            assert.equal(DETECTED, client:mode())
            if DETECTED == "script" then
                assert.equal(lock.token, srv:cli("GET", key))
            else
                assert.is_true(legacy_value(srv, key))
            end
            assert.is_true(lock:release())
            client:close()
        end)

        it("is no scripting refusal in mode script either", function()
            local client = redlock.new { servers = { format("redis://:wrong@127.0.0.1:%d", srv.port) },
                mode = "script" }
            local _, err, code = client:try_acquire(helper.key())
            assert.equal("server", code)
            assert.matches(WRONG_PASSWORD, err, 1, true)
            assert.not_matches("scripting", err)
            client:close()
        end)

        it("nor in a Redlock of three", function()
            local others = { helper.start_server(), helper.start_server() }
            local client = redlock.new { servers = { format("redis://:wrong@127.0.0.1:%d", srv.port),
                others[1]:url(), others[2]:url() } }
            local lock = assert(client:try_acquire(helper.key()))
            assert.is_nil(client:mode(1))
            assert.equal(DETECTED, client:mode(2))
            assert.is_true(lock:release())
            client:close()
            for _, o in ipairs(others) do o:stop() end
        end)
    end)

    describe("ACL users", function()
        local it = helper.needing(it, "acl")
        local srv
        setup(function()
            if helper.lacks("acl") then return end -- (each test skips, saying why)
            srv = helper.start_server { password = "admin" }
            -- (channel rules came with 6.2; before, every user has all
            -- channels)
            local channels = helper.lacks("acl_channels") and "~*" or "&*"
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "on", ">pw", "~*", channels, "+@all",
                "-@scripting"))
        end)
        teardown(function() if srv then srv:stop() end end)

        local function locker_client(opts)
            opts = opts or {}
            opts.servers = { format("redis://locker:pw@127.0.0.1:%d", srv.port) }
            return redlock.new(opts)
        end

        it("a disabled user decides nothing; enabled again, it is detected", function()
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "off"))
            local client = locker_client()
            local _, err, code = client:try_acquire(helper.key())
            assert.equal("server", code)
            -- (6.0 says only "WRONGPASS invalid username-password pair")
            assert.matches(helper.server_version().number < 60200 and "WRONGPASS" or "user is disabled", err)
            assert.is_nil(client:mode())
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "on"))
            local key = helper.key()
            local lock = assert(client:try_acquire(key))
            assert.equal("legacy", client:mode()) -- still -@scripting
            assert.is_true(lock:release())
            client:close()
        end)

        it("a user without +@scripting gets legacy mode; given it, script mode on its next connection",
            function()
                local client = locker_client()
                local key = helper.key()
                local lock = assert(client:acquire(key))
                assert.equal("legacy", client:mode())
                assert.is_true(legacy_value(srv, key))
                assert.is_true(lock:release())
                assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "+@scripting"))
                -- the same connection: the decision stands
                lock = assert(client:acquire(key))
                assert.equal("legacy", client:mode())
                assert.is_true(lock:release())
                -- a new connection (made by the acquire that found the old
                -- one gone, still legacy): the next acquire detects again
                srv:cli("CLIENT", "KILL", "USER", "locker")
                lock = assert(client:acquire(key))
                assert.equal("legacy", client:mode())
                assert.is_true(lock:release())
                lock = assert(client:acquire(key))
                assert.equal("script", client:mode())
                assert.equal(lock.token, srv:cli("GET", key))
                assert.is_true(lock:release())
                -- and back: scripting taken away is found at the next refusal:
                -- the acquire's script, or, when the acquire went without one
                -- (on a connection that ran one less than 100 ms before:
                -- redlock.scripted.grant), its release, and that key is then
                -- held until its ttl
                assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "-@scripting"))
                local taken, err, code = client:acquire(key)
                if taken then
                    local ok
                    ok, err, code = taken:release()
                    assert.is_nil(ok)
                    assert.equal(taken.token, srv:cli("GET", key))
                    srv:cli("DEL", key)
                end
                assert.equal("server", code)
                assert.matches("NOPERM", err)
                assert.matches("detects its mode again", err)
                lock = assert(client:acquire(key))
                assert.equal("legacy", client:mode())
                assert.is_true(lock:release())
                client:close()
            end)

        it("stays legacy on a new connection while a legacy lock it took may be held", function()
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "-@scripting"))
            local client = locker_client { ttl = 60000 }
            local held = assert(client:acquire(helper.key()))
            assert.equal("legacy", client:mode())
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "+@scripting"))
            srv:cli("CLIENT", "KILL", "USER", "locker")
            local key = helper.key()
            assert.is_true(assert(client:acquire(key)):release()) -- (reconnects)
            local other = assert(client:acquire(key))
            assert.equal("legacy", client:mode())
            assert.is_true(legacy_value(srv, key))
            -- the held lock is still released and extended the legacy way
            assert.is_true(held:extend())
            assert.is_true(held:release())
            assert.is_true(other:release())
            client:close()
        end)

        it("a lock renewed in legacy mode keeps the mode until its renewal ends", function()
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "-@scripting"))
            local client = locker_client { ttl = helper.ms(300) }
            assert(client:with_lock(helper.key(), function(lock)
                assert.equal("legacy", client:mode())
                -- past the ttl it was taken with: only its renewal (counted
                -- by redlock.detect.renewing) says it may be held
                local past = now() + helper.ms(400)
                wait_until(10000, "renewals past the ttl", function()
                    return now() > past and client:stats().renewed >= 2
                end)
                assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "+@scripting"))
                srv:cli("CLIENT", "KILL", "USER", "locker")
                assert.is_true(assert(client:acquire(helper.key())):release()) -- (reconnects)
                local key = helper.key()
                local inner = assert(client:acquire(key))
                assert.equal("legacy", client:mode())
                assert.is_true(legacy_value(srv, key))
                assert.is_true(inner:release())
                renewals(client, 1) -- still renewed, the legacy way
                assert.is_false((lock:lost()))
                assert.is_true(legacy_value(srv, lock.key))
            end))
            -- released: the next acquire detects again, and its renewal runs
            -- the script
            local key = helper.key()
            assert(client:with_lock(key, function(lock)
                assert.equal("script", client:mode())
                renewals(client, 1)
                assert.is_false((lock:lost()))
                assert.equal(lock.token, srv:cli("GET", key))
            end))
            client:close()
        end)

        it("a lock taken by script is extended, renewed and released by script after the server went"
            .. " legacy", function()
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "+@scripting"))
            local client = locker_client { ttl = 60000 }
            local key, rkey = helper.key(), helper.key()
            local held = assert(client:acquire(key))
            local renewed = assert(client:acquire(rkey, { ttl = 3000, renew = true }))
            assert.equal("script", client:mode())
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "-@scripting"))
            -- the next acquire goes without a script (SET NX PX and XADD,
            -- redlock.scripted.grant) and its release meets the refusal
            -- (that key stays until its ttl); where the acquire script
            -- runs (a server without streams), the acquire meets it
            local taken, err = client:acquire(helper.key())
            if taken then err = select(2, taken:release()) end
            assert.matches("detects its mode again", err)
            local other = assert(client:acquire(helper.key()))
            assert.equal("legacy", client:mode())
            assert.is_true(other:release())
            -- scripting given back: on the same connection the mode stays
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "+@scripting"))
            assert.is_true(held:extend())
            assert.is_true(held:release())
            assert.equal("0", srv:cli("EXISTS", key))
            renewals(client, 1)
            assert.is_true(renewed:release())
            assert.equal("0", srv:cli("EXISTS", rkey))
            assert.equal("legacy", client:mode())
            client:close()
        end)
    end)

    describe("a failed save (MISCONF)", function()
        -- (MISCONF came with 2.6; what is asserted is script mode kept)
        local it = helper.needing(it, "set_px")
        it("is no scripting refusal: the mode stays, and a lock taken before is released", function()
            -- a save rule, and dump.rdb made a directory: BGSAVE fails, and
            -- with stop-writes-on-bgsave-error (the default) every write,
            -- scripts included, answers MISCONF ("... Commands that may
            -- modify the data set are disabled ...")
            -- (`save "3600 1"`, one argument, is 7.0's form: before, it is
            -- ignored, and nothing fails)
            local srv = helper.start_server { config = { "save 3600 1" } }
            assert.matches("^save\n3600 1$", srv:cli("CONFIG", "GET", "save"))
            local fresh = redlock.new { servers = { srv:url() } }
            local decided = redlock.new { servers = { srv:url() }, ttl = 60000 }
            local key = helper.key()
            local pre = assert(decided:acquire(key))
            assert.equal("script", decided:mode())
            local function bgsave(status)
                srv:cli("BGSAVE")
                wait_until(10000, "bgsave " .. status, function()
                    local info = srv:cli("INFO", "persistence")
                    return info:find("rdb_bgsave_in_progress:0", 1, true)
                        and info:find("rdb_last_bgsave_status:" .. status, 1, true)
                end)
            end
            assert(os.execute("mkdir " .. srv.dir .. "/dump.rdb"))
            bgsave("err")
            for _, client in ipairs { fresh, decided, fresh, decided } do
                local lock, err, code = client:try_acquire(helper.key())
                assert.is_nil(lock)
                assert.equal("server", code)
                assert.matches("MISCONF", err)
                assert.not_matches("legacy", err)
                assert.not_matches("refuses scripting", err)
            end
            assert.is_nil(fresh:mode())
            assert.equal("script", decided:mode())
            assert(os.execute("rmdir " .. srv.dir .. "/dump.rdb"))
            bgsave("ok")
            assert.is_true(pre:release())
            assert.equal("0", srv:cli("EXISTS", key))
            local lock = assert(fresh:try_acquire(key))
            assert.equal("script", fresh:mode())
            assert.equal(lock.token, srv:cli("GET", key))
            assert.is_true(lock:release())
            fresh:close()
            decided:close()
            srv:stop()
        end)
    end)

    describe("scripting renamed away", function()
        -- (before 2.6.12 auto gives legacy mode whatever is renamed: the
        -- next test says the server refuses scripting there too)
        it("gives legacy mode; the server restarted with scripting gives script mode again", function()
            helper.needs("set_px")
            local srv = helper.start_server { config = NOSCRIPT }
            local client = redlock.new { servers = { srv:url() } }
            local key = helper.key()
            local lock = assert(client:acquire(key))
            assert.equal("legacy", client:mode())
            assert.is_true(lock:release())
            srv.config = nil
            srv:restart()
            assert.is_true(assert(client:acquire(key)):release()) -- (reconnects)
            assert.equal("legacy", client:mode())
            lock = assert(client:acquire(key))
            assert.equal("script", client:mode())
            assert.equal(lock.token, srv:cli("GET", key))
            assert.is_true(lock:release())
            -- restarted without scripting again: found at the first refusal
            srv.config = NOSCRIPT
            srv:restart()
            local _, err, code = client:acquire(key)
            assert.equal("server", code)
            assert.matches("unknown command", err)
            lock = assert(client:acquire(key))
            assert.equal("legacy", client:mode())
            assert.is_true(lock:release())
            client:close()
            srv:stop()
        end)

        it("in mode script, a server restarted without it: no lock is taken that it could not release", function()
            -- (the uncontended acquire goes without a script once a script
            -- ran, on that connection only: a new one asks the script first)
            helper.needs("set_px")
            local srv = helper.start_server {}
            local client = redlock.new { servers = { srv:url() }, mode = "script" }
            local key = helper.key()
            for _ = 1, 2 do assert.is_true(assert(client:acquire(key)):release()) end
            srv.config = NOSCRIPT
            srv:restart()
            for _ = 1, 2 do
                local lock, err, code = client:acquire(key, { wait = 0 })
                assert.is_nil(lock)
                assert.equal("server", code)
                assert.matches("this server refuses scripting", err)
            end
            assert.equal("0", srv:cli("DBSIZE"))
            client:close()
            srv:stop()
        end)

        it("in mode script, says the server refuses scripting", function()
            local srv = helper.start_server { config = NOSCRIPT }
            local client = redlock.new { servers = { srv:url() }, mode = "script" }
            local _, err = client:acquire(helper.key())
            assert.matches("this server refuses scripting", err)
            assert.equal("script", client:mode())
            client:close()
            srv:stop()
        end)
    end)
end)
