-- Mode "auto": only a refusal of scripting decides legacy mode (never a
-- wrong password, a disabled user, a connection error), and a server found
-- without scripting is asked again on a new connection. Against real
-- redis-servers: passwords changed with CONFIG SET, ACL users without
-- +@scripting, EVAL renamed away and back.
local helper = require "helper"
local redlock = require "redlock"

local format, match = string.format, string.match

local NOSCRIPT = {
    'rename-command EVAL ""', 'rename-command EVALSHA ""', 'rename-command SCRIPT ""',
    'rename-command FUNCTION ""', 'rename-command FCALL ""',
}

-- Whether the value of key is a legacy one ("<expiry ms>:<token>").
local function legacy_value(srv, key) return match(srv:cli("GET", key), "^%d+:%x+$") ~= nil end

describe("mode auto", function()
    teardown(helper.stop_all)

    describe("a wrong password", function()
        local srv
        before_each(function() srv = helper.start_server { password = "right" } end)
        after_each(function() srv:stop() end)

        it("decides nothing, and once the server takes it the client runs scripts", function()
            local client = redlock.new { servers = { format("redis://:wrong@127.0.0.1:%d", srv.port) } }
            local key = helper.key()
            for _ = 1, 2 do
                local lock, err, code = client:try_acquire(key)
                assert.is_nil(lock)
                assert.equal("server", code)
                assert.matches("WRONGPASS", err)
                assert.not_matches("legacy", err)
                assert.not_matches("wrong", err) -- never the password
                assert.is_nil(client:mode())
            end
            assert.equal("OK", srv:cli("CONFIG", "SET", "requirepass", "wrong"))
            srv.password = "wrong"
            local lock = assert(client:try_acquire(key))
            assert.equal("script", client:mode())
            assert.equal(lock.token, srv:cli("GET", key))
            assert.is_true(lock:release())
            client:close()
        end)

        it("is no scripting refusal in mode script either", function()
            local client = redlock.new { servers = { format("redis://:wrong@127.0.0.1:%d", srv.port) },
                mode = "script" }
            local _, err, code = client:try_acquire(helper.key())
            assert.equal("server", code)
            assert.matches("WRONGPASS", err)
            assert.not_matches("scripting", err)
            client:close()
        end)

        it("nor in a Redlock of three", function()
            local others = { helper.start_server(), helper.start_server() }
            local client = redlock.new { servers = { format("redis://:wrong@127.0.0.1:%d", srv.port),
                others[1]:url(), others[2]:url() } }
            local lock = assert(client:try_acquire(helper.key()))
            assert.is_nil(client:mode(1))
            assert.equal("script", client:mode(2))
            assert.is_true(lock:release())
            client:close()
            for _, o in ipairs(others) do o:stop() end
        end)
    end)

    describe("ACL users", function()
        local srv
        setup(function()
            srv = helper.start_server { password = "admin" }
            assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all",
                "-@scripting"))
        end)
        teardown(function() srv:stop() end)

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
            assert.matches("user is disabled", err)
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
                -- and back: scripting taken away is found at the next refusal
                assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "-@scripting"))
                local _, err, code = client:acquire(key)
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
            local client = locker_client { ttl = 300 }
            assert(client:with_lock(helper.key(), function(lock)
                assert.equal("legacy", client:mode())
                assert.equal("OK", srv:cli("ACL", "SETUSER", "locker", "+@scripting"))
                srv:cli("CLIENT", "KILL", "USER", "locker")
                assert.is_true(assert(client:acquire(helper.key())):release()) -- (reconnects)
                local key = helper.key()
                local inner = assert(client:acquire(key))
                assert.equal("legacy", client:mode())
                assert.is_true(legacy_value(srv, key))
                assert.is_true(inner:release())
                helper.sleep(400) -- past the ttl: renewed meanwhile, the legacy way
                assert.is_false((lock:lost()))
                assert.is_true(legacy_value(srv, lock.key))
            end))
            -- released: the next acquire detects again, and its renewal runs
            -- the script
            local key = helper.key()
            assert(client:with_lock(key, function(lock)
                assert.equal("script", client:mode())
                helper.sleep(400)
                assert.is_false((lock:lost()))
                assert.equal(lock.token, srv:cli("GET", key))
            end))
            client:close()
        end)
    end)

    describe("scripting renamed away", function()
        it("gives legacy mode; the server restarted with scripting gives script mode again", function()
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
