-- Connections: AUTH, ACL users, unix sockets, db selection, servers that are
-- missing, killed, restarted, or drop us.
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"

local function no_secret(s, secret)
    assert.is_nil(tostring(s):find(secret, 1, true), "secret leaked: " .. tostring(s))
end

describe("connections", function()
    teardown(function() helper.stop_all() end)

    describe("AUTH", function()
        local server
        setup(function()
            server = helper.start_server {
                password = "top-secret-pw",
                config = { "user alice on >alice-secret-pw ~* &* +@all" },
            }
        end)

        it("works with the right password (URL and table forms)", function()
            for _, s in ipairs {
                string.format("redis://:top-secret-pw@127.0.0.1:%d", server.port),
                server:spec { password = "top-secret-pw" },
            } do
                local c = redlock.new { servers = { s } }
                local lock = assert(c:acquire(helper.key()))
                assert.is_true(lock:release())
                no_secret(tostring(c), "top-secret-pw")
                c:close()
            end
        end)

        it("works with a Redis 6 ACL user", function()
            local c = redlock.new { servers = {
                string.format("redis://alice:alice-secret-pw@127.0.0.1:%d", server.port) } }
            local lock = assert(c:acquire(helper.key()))
            assert.is_true(lock:release())
            c:close()
        end)

        it("the lock user of docs/security.md may do everything the library does (script and legacy mode)",
            function()
            local f = assert(io.open("docs/security.md"))
            local doc = f:read("*a")
            f:close()
            local acl = assert(doc:match("\n(ACL SETUSER locker [^\n]+)\n"), "no ACL line in docs/security.md")
            local legacy = assert(doc:match("legacy mode adds\n?%s*`([^`]+)`"), "no legacy commands")
            local data = core.conn(server:spec { password = "top-secret-pw" })
            finally(function() data:close() end)
            local unpack = table.unpack or unpack -- luacheck: ignore 143
            local args = {}
            for word in acl:gmatch("%S+") do args[#args + 1] = word end
            for _, mode in ipairs { "script", "legacy" } do
                -- ACL SETUSER locker ... (the rules after the two words), reset first
                data:command("ACL", "DELUSER", "locker")
                assert.equal("OK", data:command("ACL", "SETUSER", unpack(args, 3)))
                if mode == "legacy" then
                    local more = {}
                    for word in legacy:gmatch("%S+") do more[#more + 1] = word end
                    assert.equal("OK", data:command("ACL", "SETUSER", "locker", unpack(more)))
                end
                local url = string.format("redis://locker:pw@127.0.0.1:%d", server.port)
                local c = redlock.new { servers = { url }, mode = mode }
                local key = helper.key("lock:acl")
                local lock = assert(c:acquire(key, { ttl = 10000 }))
                assert.equal("locked", select(3, c:try_acquire(key)))
                assert.equal("timeout", select(3, c:acquire(key, { wait = 50 }))) -- joins, gives up
                assert.is_true(lock:extend(10000))
                -- a waiter in another process: the release hands it the lock
                local worker = helper.spawn("spec/workers/lock_worker.lua", "wait", url, key, 20, 8000,
                    "notify", 300)
                -- (a worker under valgrind takes seconds to start)
                assert.is_true(helper.eventually(helper.ms(5000), function()
                    return mode == "legacy" or data:command("EXISTS", "{" .. key .. "}:waiters") == 1
                end))
                assert.is_true(lock:release())
                local status, out = worker:wait()
                assert.equal(0, status, out)
                -- renewal in the background
                assert(c:with_lock(key, { ttl = helper.ms(300) }, function() core.sleep(helper.ms(700)) end))
                assert.equal(0, data:command("EXISTS", key))
                c:close()
            end
            data:command("ACL", "DELUSER", "locker")
        end)

        it("fails with a wrong password as 'server', without showing it", function()
            local c = redlock.new { servers = {
                string.format("redis://alice:wrong-pw-123@127.0.0.1:%d", server.port) } }
            local lock, err, code = c:acquire(helper.key())
            assert.is_nil(lock)
            assert.equal("server", code)
            assert.matches("^server: 127%.0%.0%.1:%d+: AUTH failed: WRONGPASS", err)
            no_secret(err, "wrong-pw-123")
            no_secret(err, "alice-secret-pw")
            c:close()
        end)

        it("fails without a password as 'server' (NOAUTH)", function()
            local c = redlock.new { servers = { server:url() } }
            local lock, err, code = c:try_acquire(helper.key())
            assert.is_nil(lock)
            assert.equal("server", code)
            assert.matches("NOAUTH", err)
            c:close()
        end)

        it("never shows the password in tostring of a conn", function()
            local conn = core.conn(server:spec { password = "top-secret-pw" })
            no_secret(tostring(conn), "top-secret-pw")
            conn:close()
        end)
    end)

    describe("unix sockets and databases", function()
        local server
        setup(function() server = helper.start_server() end)

        it("locks over a unix socket", function()
            local c = redlock.new { servers = { "unix://" .. server.socket } }
            local key = helper.key()
            local lock = assert(c:acquire(key))
            assert.equal(lock.token, server:cli("GET", key))
            assert.is_true(lock:release())
            assert.matches("^redlock.client %(unix:/", tostring(c))
            c:close()
        end)

        it("selects the database from the URL, the socket query and the table", function()
            for _, s in ipairs {
                server:url(5),
                "unix://" .. server.socket .. "?db=5",
                server:spec { db = 5 },
            } do
                local c = redlock.new { servers = { s } }
                local key = helper.key()
                local lock = assert(c:acquire(key))
                assert.equal("", server:cli("GET", key))
                assert.equal(lock.token, server:cli("-n", "5", "GET", key))
                lock:release()
                c:close()
            end
        end)

        it("reports a bad database as 'server'", function()
            local c = redlock.new { servers = { server:url(99999) } }
            local _, err, code = c:try_acquire(helper.key())
            assert.equal("server", code)
            assert.matches("SELECT failed", err)
            c:close()
        end)
    end)

    describe("failures", function()
        it("gives 'connection' within the connect timeout when nothing listens", function()
            local dir = helper.fresh_dir("nothing")
            for _, s in ipairs { "redis://127.0.0.1:1", "unix://" .. dir .. "/none.sock" } do
                local c = redlock.new { servers = { s }, connect_timeout = 200, wait = 5000 }
                local t0 = core.now()
                local lock, err, code = c:acquire(helper.key())
                assert.is_nil(lock)
                assert.equal("connection", code)
                assert.matches("^connection: .*could not connect", err)
                assert.is_true(core.now() - t0 < 1000, "took " .. (core.now() - t0))
                c:close()
            end
        end)

        it("gives 'connection' after the server is killed, and reconnects once it is back", function()
            local server = helper.start_server()
            local c = redlock.new { servers = { server:url() }, connect_timeout = 300 }
            local lock = assert(c:acquire(helper.key()))
            server:kill()
            local ok, err, code = lock:release()
            assert.is_nil(ok)
            assert.equal("connection", code)
            assert.matches("^connection: 127%.0%.0%.1:" .. server.port, err)
            assert.matches("releasing", err)
            local _, _, code2 = c:try_acquire(helper.key())
            assert.equal("connection", code2)
            server:restart()
            local again = assert(c:try_acquire(helper.key()))
            assert.is_true(again:release())
            c:close()
            server:stop()
        end)

        it("transparently replaces a connection the server dropped (CLIENT KILL)", function()
            local server = helper.start_server()
            local c = redlock.new { servers = { server:url() } }
            local lock = assert(c:acquire(helper.key()))
            assert.matches("^%d+$", server:cli("CLIENT", "KILL", "TYPE", "normal"))
            assert.is_true(lock:release())
            -- and an acquire (the first attempt, then a refused one)
            assert.matches("^%d+$", server:cli("CLIENT", "KILL", "TYPE", "normal"))
            lock = assert(c:acquire(helper.key()))
            assert.matches("^%d+$", server:cli("CLIENT", "KILL", "TYPE", "normal"))
            local _, _, code = c:try_acquire(lock.key)
            assert.equal("locked", code)
            assert.is_true(lock:release())
            c:close()
            server:stop()
        end)

        -- The lock without a script sends SET NX PX and XADD in one write:
        -- SET's reply came, XADD's did not (the connection closed, no
        -- timeout). The key may hold our token: the acquire script, on a
        -- new connection, takes it as ours (redlock_io_stale's tail rule).
        it("takes a lock whose XADD reply was lost after SET's (the connection closed) by the script", function()
            local server = helper.start_server()
            local proxy = helper.start_hold_proxy(server, 0)
            local store = core.conn(server:spec())
            local function calls(name)
                local info = store:command("INFO", "commandstats")
                return tonumber(info:match("cmdstat_" .. name .. ":calls=(%d+)") or "0")
            end
            local c = redlock.new { servers = { proxy.url() } }
            -- (the first lock runs the acquire script; the next go without one)
            assert(c:acquire(helper.key())):release()
            local key = helper.key("cut")
            local sets, xadds, scripts = calls("set"), calls("xadd"), calls("evalsha") + calls("eval")
            proxy.cut()
            local lock, err = c:try_acquire(key)
            assert(lock, err)
            assert.equal(lock.token, store:command("GET", key))
            assert.is_true(lock.fence > 0)
            -- SET and XADD ran, then the script, on a new connection (its
            -- XADD the lock's fence)
            assert.equal(sets + 1, calls("set"))
            assert.equal(xadds + 2, calls("xadd"))
            assert.equal(scripts + 1, calls("evalsha") + calls("eval"))
            assert.is_true(lock:release())
            c:close()
            store:close()
            proxy.stop()
            server:stop()
        end)

        it("times out on a frozen server with 'connection ... timed out', naming it", function()
            local server = helper.start_server()
            local c = redlock.new { servers = { server:url() }, timeout = 200 }
            assert(c:try_acquire(helper.key())):release()
            server:freeze()
            local t0 = core.now()
            local lock, err, code = c:acquire(helper.key(), { wait = 5000 })
            local took = core.now() - t0
            server:thaw()
            assert.is_nil(lock)
            assert.equal("connection", code)
            assert.matches("^connection: 127%.0%.0%.1:%d+: timed out after 200 ms", err)
            assert.is_true(took < 2000, "took " .. took)
            -- after the thaw, the next call works on a fresh connection
            assert(c:try_acquire(helper.key())):release()
            c:close()
            server:stop()
        end)
    end)

    describe("after fork()", function()
        local build = os.getenv("REDLOCK_BUILD") or "build"
        local forktest = assert(package.loadlib(build .. "/tests/forktest.so", "luaopen_forktest"))()

        -- n acquire/release cycles on key: the fence must go up each time,
        -- and a GET on the client's own connection must answer our token
        -- (a reply meant for the other process would not); or the first failure
        local function cycles(client, key, n)
            local last
            for i = 1, n do
                local lock, err = client:acquire(key, { wait = 2000 })
                if not lock then return "acquire " .. i .. ": " .. tostring(err) end
                if last and lock.fence <= last then
                    return string.format("acquire %d: fence %s after %s (another process's reply?)",
                        i, tostring(lock.fence), tostring(last))
                end
                local held = client.servers[1].conn:command("GET", key)
                if held ~= lock.token then
                    return string.format("acquire %d: GET answered %s (another process's reply?)", i, tostring(held))
                end
                last = lock.fence
                local ok, rerr = lock:release()
                if not ok then return "release " .. i .. ": " .. tostring(rerr) end
            end
            return nil
        end

        -- Uses client once, forks, and runs n cycles in both processes at
        -- once, each on a key of its own; asserts both went right.
        local function both_sides(client, n)
            local parent_key, child_key = helper.key("parent"), helper.key("child")
            assert(client:acquire(parent_key)):release() -- connected before the fork
            local pid = forktest.fork()
            if pid == 0 then
                local failure = cycles(client, child_key, n)
                if failure then io.stderr:write("child: ", failure, "\n") end
                forktest.exit(failure and 1 or 0)
            end
            local failure = cycles(client, parent_key, n)
            local status = forktest.wait(pid)
            assert.is_nil(failure)
            assert.equal(0, status, "the child failed (see its message above)")
            return parent_key
        end

        it("parent and child never share a connection a client made before the fork", function()
            local server = helper.start_server()
            local client = redlock.new { servers = { server:url() } }
            local parent_key = both_sides(client, 300)
            -- the parent's connection still works, and the child's copy was
            -- never closed under it
            assert(client:try_acquire(parent_key)):release()
            client:close()
            server:stop()
        end)

        it("nor do their Redlock fan-outs (three servers)", function()
            local servers, urls = {}, {}
            for i = 1, 3 do
                servers[i] = helper.start_server()
                urls[i] = servers[i]:url()
            end
            -- (server_timeout: every server answers each round, which the
            -- GET on the first one counts on, however slow valgrind is)
            local client = redlock.new { servers = urls, server_timeout = 2000 }
            both_sides(client, 150)
            client:close()
            for i = 1, 3 do servers[i]:stop() end
        end)
    end)
end)
