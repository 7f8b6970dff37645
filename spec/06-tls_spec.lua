-- TLS (rediss:// and the tls table): redis-server with --tls-port and
-- certificates made by openssl at test time (one set for the whole file).
local helper = require "helper"
local redlock = require "redlock"

-- A server built without TLS (../shared/servers' builds) skips each test.
local NO_TLS = helper.lacks("tls")
local it = helper.needing(it, "tls")

describe("TLS", function()
    local certs, plain, mutual, expired, others
    setup(function()
        if NO_TLS then return end
        certs = helper.tls_certs()
        plain = helper.start_tls_server(certs) -- tls-auth-clients no
        mutual = helper.start_tls_server(certs, { auth_clients = "yes" })
        expired = helper.start_tls_server(certs, { cert = certs.expired_crt })
        others = { helper.start_tls_server(certs), helper.start_tls_server(certs) }
    end)
    teardown(function() helper.stop_all() end)

    local function client_on(server, tls, extra)
        local o = { servers = { server:tls_url() }, tls = tls, retry_delay = 10,
                    connect_timeout = 1000 }
        for k, v in pairs(extra or {}) do o[k] = v end
        return redlock.new(o)
    end

    local function lock_cycle(c)
        local key = helper.key("tls")
        local lock = assert(c:acquire(key, { ttl = 5000 }))
        assert.is_nil(c:try_acquire(key))
        assert.is_true(lock:extend(5000))
        assert.is_true(lock:release())
        local again = assert(c:try_acquire(key))
        assert.is_true(again:release())
    end

    it("runs the lock API over rediss:// with the test CA (no client certificate)", function()
        local c = client_on(plain, { ca_file = certs.ca })
        lock_cycle(c)
        c:close()
    end)

    it("takes the tls table in a server table, and server_name for a name check", function()
        local c = redlock.new { servers = { { host = "127.0.0.1", port = plain.tls_port,
            tls = { ca_file = certs.ca, server_name = "localhost" } } } }
        lock_cycle(c)
        c:close()
    end)

    it("sends a client certificate to a server with tls-auth-clients yes", function()
        local c = client_on(mutual, { ca_file = certs.ca, cert_file = certs.client_crt,
                                      key_file = certs.client_key })
        lock_cycle(c)
        c:close()
        local bare = client_on(mutual, { ca_file = certs.ca })
        local lock, err, code = bare:try_acquire(helper.key("tls"))
        assert.is_nil(lock)
        assert.equal("connection", code)
        assert.truthy(err:find("127.0.0.1:" .. mutual.tls_port, 1, true), err)
        bare:close()
    end)

    it("runs Redlock over 3 TLS servers, and renewal over TLS", function()
        local tls = { ca_file = certs.ca, cert_file = certs.client_crt, key_file = certs.client_key }
        local c = redlock.new { servers = { mutual:tls_url(), others[1]:tls_url(),
                                            others[2]:tls_url() }, tls = tls, retry_delay = 10,
                            server_timeout = 1000 }
        lock_cycle(c)
        local key = helper.key("tls")
        local other = redlock.new { servers = { mutual:tls_url(), others[1]:tls_url(),
                                                others[2]:tls_url() }, tls = tls, server_timeout = 1000 }
        -- (a 1 s ttl: room for a late renewal round on a busy machine)
        local ok, taken = c:with_lock(key, { ttl = helper.ms(1000) }, function()
            helper.sleep(helper.ms(3000)) -- three ttls: only the renewal thread keeps it
            return other:try_acquire(key)
        end)
        assert.is_true(ok)
        assert.is_nil(taken)
        c:close()
        other:close()
    end)

    it("after fork(), parent and child each use their own TLS session", function()
        local build = os.getenv("REDLOCK_BUILD") or "build"
        local forktest = assert(package.loadlib(build .. "/tests/forktest.so", "luaopen_forktest"))()
        local c = client_on(plain, { ca_file = certs.ca })
        local function cycles(key)
            for i = 1, 50 do
                local lock, err = c:acquire(key, { wait = 2000 })
                if not lock then return "acquire " .. i .. ": " .. tostring(err) end
                local ok, rerr = lock:release()
                if not ok then return "release " .. i .. ": " .. tostring(rerr) end
            end
        end
        assert(c:acquire(helper.key("tls"))):release() -- a session made before the fork
        local pid = forktest.fork()
        if pid == 0 then
            local failure = cycles(helper.key("child"))
            if failure then io.stderr:write("child: ", failure, "\n") end
            forktest.exit(failure and 1 or 0)
        end
        local failure = cycles(helper.key("parent"))
        assert.is_nil(failure)
        assert.equal(0, forktest.wait(pid), "the child failed (see its message above)")
        c:close()
    end)

    -- Each failure: a connection error naming the server and the reason.
    local function refused(c, server_port, reason)
        local lock, err, code = c:try_acquire(helper.key("tls"))
        assert.is_nil(lock)
        assert.equal("connection", code)
        assert.truthy(err:find("127.0.0.1:" .. server_port, 1, true), err)
        assert.truthy(err:find(reason), err)
        c:close()
    end

    it("refuses an unknown CA, a wrong name and an expired certificate", function()
        refused(client_on(plain, { ca_file = certs.other_ca }), plain.tls_port,
            "unknown CA")
        refused(client_on(plain, { ca_file = certs.ca, server_name = "wrong.example" }),
            plain.tls_port, "name mismatch")
        refused(client_on(expired, { ca_file = certs.ca }), expired.tls_port,
            "expired certificate")
        -- rediss:// alone: the system's CA store does not know the test CA
        refused(client_on(plain, nil), plain.tls_port, "unknown CA")
    end)

    it("verify = false skips the checks (unsafe, explicit)", function()
        lock_cycle(client_on(expired, { verify = false, server_name = "wrong.example" }))
    end)

    it("refuses a plaintext server on a TLS URL, and answers a plain URL on a TLS port " ..
       "with a connection error (never a hang)", function()
        refused(redlock.new { servers = { string.format("rediss://127.0.0.1:%d", plain.port) },
                              tls = { ca_file = certs.ca } },
            plain.port, "plaintext server")
        refused(redlock.new { servers = { string.format("redis://127.0.0.1:%d", plain.tls_port) },
                              timeout = 500 },
            plain.tls_port, "the server may want TLS %(rediss://%)")
    end)

    -- bin/redlock with env assignments before it; returns its exit code and output
    local function cli(env, args)
        local out = helper.read_cmd(string.format("env %s %s bin/redlock %s 2>&1; echo \"rc=$?\"",
            env, os.getenv("REDLOCK_LUA") or "lua5.4", args))
        return tonumber(out:match("rc=(%d+)%s*$")), out
    end

    it("the CLI: --tls-* options and REDLOCK_TLS_* variables", function()
        local key = helper.key("tls")
        local code, out = cli("", string.format(
            "run -s %s --tls-ca-file %s --tls-cert-file %s --tls-key-file %s %s -- sh -c 'echo held'",
            mutual:tls_url(), certs.ca, certs.client_crt, certs.client_key, key))
        assert.equal(0, code, out)
        assert.truthy(out:find("held", 1, true), out)
        code, out = cli("REDLOCK_TLS_CA_FILE=" .. certs.ca .. " REDLOCK_TLS_SERVER_NAME=localhost",
            string.format("run -s redis://127.0.0.1:%d %s -- true", plain.tls_port, key))
        assert.equal(0, code, out)
        code, out = cli("REDLOCK_TLS_CA_FILE=" .. certs.other_ca,
            string.format("try -s %s %s", plain:tls_url(), key))
        assert.equal(69, code, out)
        assert.truthy(out:find("unknown CA", 1, true), out)
        code, out = cli("REDLOCK_TLS_INSECURE=1", string.format("try -s %s %s -- true",
            expired:tls_url(), key))
        assert.equal(0, code, out)
    end)

    it("checks the tls options", function()
        assert.has_error(function() redlock.new { tls = { ca_fle = "x" } } end,
            "bad option 'tls' to 'new' (unknown field 'ca_fle' in tls)")
        assert.has_error(function() redlock.new { tls = { verify = "no" } } end,
            "bad option 'tls' to 'new' (field 'verify' of tls: boolean expected, got string)")
        assert.has_error(function() redlock.new { tls = { cert_file = "c" } } end,
            "bad option 'tls' to 'new' (tls: cert_file and key_file go together)")
        local c = redlock.new { servers = { { host = "127.0.0.1", port = plain.tls_port,
            tls = { ca_file = certs.dir .. "/missing.crt" } } } }
        refused(c, plain.tls_port, "could not load ca_file")
    end)
end)

-- The same on servers with no plaintext port and no unix socket at all
-- (`port 0 --tls-port N`): whatever works here went over TLS, the renewal
-- thread's and the waiter's connections included.
describe("TLS only (no plaintext port)", function()
    local certs, only, mutual, others, urls
    local with_cert
    setup(function()
        if NO_TLS then return end
        certs = helper.tls_certs()
        only = helper.start_tls_server(certs, { tls_only = true })
        mutual = helper.start_tls_server(certs, { tls_only = true, auth_clients = "yes" })
        others = { helper.start_tls_server(certs, { tls_only = true }),
                   helper.start_tls_server(certs, { tls_only = true }) }
        urls = { mutual:tls_url(), others[1]:tls_url(), others[2]:tls_url() }
        with_cert = { ca_file = certs.ca, cert_file = certs.client_crt, key_file = certs.client_key }
    end)
    teardown(function() helper.stop_all() end)

    -- every call of the lock API; servers: where to look at the key
    local function whole_api(c, servers)
        local key = helper.key("tls")
        local lock = assert(c:acquire(key, { ttl = 5000 }))
        -- (legacy mode stores "<expiry ms>:<token>")
        for _, s in ipairs(servers) do assert.equal(lock.token, s:cli("GET", key):sub(-32)) end
        assert.is_number(lock.fence)
        assert.is_true(lock:remaining() > 0)
        local none, err, code = c:try_acquire(key)
        assert.is_nil(none)
        assert.equal("locked", code, err)
        assert.is_true(lock:extend(8000))
        assert.is_true(tonumber(servers[1]:cli("PTTL", key)) > 5000)
        assert.is_true(lock:release())
        local ok
        ok, err, code = lock:release()
        assert.is_nil(ok)
        assert.equal("not owner", code, err)
        local results = { c:with_lock(key, function(l)
            assert.is_true(l.fence > lock.fence)
            return "done", nil
        end) }
        assert.same({ true, "done", nil }, results)
        assert.equal(3, select("#", c:with_lock(key, function() return 1, nil end)))
        assert.has_error(function() c:with_lock(key, function() error("boom", 0) end) end, "boom")
        for _, s in ipairs(servers) do assert.equal("0", s:cli("EXISTS", key)) end
        c:close()
        none, err, code = c:try_acquire(key)
        assert.is_nil(none)
        assert.equal("closed", code, err)
    end

    it("runs the whole lock API without a client certificate, and with one where the server asks",
        function()
        whole_api(redlock.new { servers = { only:tls_url() }, tls = { ca_file = certs.ca } }, { only })
        whole_api(redlock.new { servers = { mutual:tls_url() }, tls = with_cert }, { mutual })
        -- legacy mode (WATCH/MULTI/EXEC) takes the same path
        whole_api(redlock.new { servers = { only:tls_url() }, tls = { ca_file = certs.ca },
                                mode = "legacy" }, { only })
    end)

    it("a waiter is woken over TLS by a release from the CLI over TLS (not by a poll)", function()
        local key = helper.key("tls")
        local holder = redlock.new { servers = { only:tls_url() }, tls = { ca_file = certs.ca } }
        local lock = assert(holder:acquire(key, { ttl = 60000 }))
        -- polling would sleep 10 s, past the wait of 5 s: only the release's
        -- wake-up, read by BLPOP on the waiter's own TLS connection, lets it in
        local waiter = redlock.new { servers = { only:tls_url() }, tls = { ca_file = certs.ca },
                                     retry_delay = 10000, retry_jitter = 0, wait = 5000 }
        helper.later(300, helper.lua_cmd("bin/redlock", "release", "-s", only:tls_url(),
            "--tls-ca-file", certs.ca, key, lock.token))
        local got, err = waiter:acquire(key)
        assert.is_truthy(got, err)
        assert.equal(got.token, only:cli("GET", key))
        assert.is_true(got:release())
        holder:close()
        waiter:close()
    end)

    it("runs Redlock over 3 TLS servers and renews over TLS", function()
        local servers = { mutual, others[1], others[2] }
        local c = redlock.new { servers = urls, tls = with_cert, retry_delay = 10, server_timeout = 1000 }
        local other = redlock.new { servers = urls, tls = with_cert, server_timeout = 1000 }
        local key = helper.key("tls")
        -- (a 1 s ttl: renewed every third of it on each server, with room
        -- for a late round on a busy machine)
        local ok, taken, token = c:with_lock(key, { ttl = helper.ms(1000) }, function(lock)
            helper.sleep(helper.ms(3000)) -- three ttls: only the renewal thread keeps it
            for _, s in ipairs(servers) do assert.equal(lock.token, s:cli("GET", key)) end
            return other:try_acquire(key), lock.token
        end)
        assert.is_true(ok)
        assert.is_nil(taken)
        assert.is_string(token)
        other:close()
        whole_api(c, servers)
    end)

    it("Redlock: a frozen server, or a plaintext one, costs its own handshake only: the others grant the lock",
        function()
        -- the handshakes run side by side: one server that never answers
        -- must not hold back the others' until their time is up
        local frozen = helper.start_tls_server(certs, { tls_only = true })
        local plaintext = helper.start_server()
        frozen:freeze()
        for _, first in ipairs { frozen:tls_url(), "rediss://127.0.0.1:" .. plaintext.port } do
            local c = redlock.new { servers = { first, others[1]:tls_url(), others[2]:tls_url() },
                                    tls = { ca_file = certs.ca }, connect_timeout = 2000 }
            local key = helper.key("tls")
            local lock, err = c:try_acquire(key)
            assert.is_truthy(lock, err)
            assert.equal(lock.token, others[1]:cli("GET", key))
            assert.equal(lock.token, others[2]:cli("GET", key))
            assert.is_true(lock:release())
            c:close()
        end
        -- two of them: no quorum, each named with its reason
        local c = redlock.new { servers = { frozen:tls_url(), "rediss://127.0.0.1:" .. plaintext.port,
                                            others[1]:tls_url() }, tls = { ca_file = certs.ca } }
        local lock, err, code = c:try_acquire(helper.key("tls"))
        assert.is_nil(lock)
        assert.equal("no quorum", code, err)
        for _, port in ipairs { frozen.port, plaintext.port } do
            assert.truthy(err:find("127.0.0.1:" .. port .. ": TLS handshake timed out after", 1, true), err)
        end
        c:close()
        frozen:stop()
        plaintext:stop()
    end)

    -- a connection error naming the server and the reason
    local function refused(c, port, reason, code)
        local lock, err, got = c:try_acquire(helper.key("tls"))
        assert.is_nil(lock)
        assert.equal(code or "connection", got, err)
        assert.truthy(err:find("127.0.0.1:" .. port, 1, true), err)
        assert.truthy(err:find(reason, 1, true), err)
        c:close()
    end

    it("refuses a plaintext server on a rediss:// URL, and a redis:// URL on a TLS-only port", function()
        local plaintext = helper.start_server() -- no TLS at all
        refused(redlock.new { servers = { "rediss://127.0.0.1:" .. plaintext.port },
                              tls = { ca_file = certs.ca }, connect_timeout = 500 },
            plaintext.port, "(no TLS answer: a plaintext server?)")
        -- the server drops the connection on the first bytes that are no TLS
        refused(redlock.new { servers = { only:url() }, connect_timeout = 500, timeout = 500 },
            only.port, "the server may want TLS (rediss://)")
        -- the same from Redlock's fan-out (each server's reason in the message)
        refused(redlock.new { servers = { only:url(), others[1]:url(), others[2]:url() },
                              connect_timeout = 500, timeout = 500 },
            others[1].port, "the server may want TLS (rediss://)", "no quorum")
        plaintext:stop()
    end)

    it("Redlock: a certificate refused by every server is 'no quorum' with each server's reason", function()
        refused(redlock.new { servers = urls, tls = { ca_file = certs.other_ca, cert_file = certs.client_crt,
                                                      key_file = certs.client_key } },
            mutual.port, "TLS certificate verification failed (unknown CA:", "no quorum")
        refused(redlock.new { servers = urls, tls = { ca_file = certs.ca, server_name = "wrong.example" } },
            others[2].port, "TLS certificate verification failed (name mismatch:", "no quorum")
    end)

    it("the CLI on a TLS-only server: try prints a token, status sees it, release frees it", function()
        local key = helper.key("tls")
        local unpack = table.unpack or unpack
        local function cli(command, ...)
            local args = { command, "-s", mutual:tls_url(), "--tls-ca-file", certs.ca,
                           "--tls-cert-file", certs.client_crt, "--tls-key-file", certs.client_key, ... }
            local out = helper.read_cmd(helper.lua_cmd("bin/redlock", unpack(args)) .. " 2>&1; echo \"rc=$?\"")
            return tonumber(out:match("rc=(%d+)%s*$")), out
        end
        local code, out = cli("try", "--ttl", "60000", key)
        assert.equal(0, code, out)
        local token = out:match("^(%x+)%s")
        assert.equal(token, mutual:cli("GET", key), out)
        code, out = cli("status", key)
        assert.equal(0, code, out)
        assert.truthy(out:find(token:sub(1, 8), 1, true), out)
        code, out = cli("release", key, token)
        assert.equal(0, code, out)
        assert.equal("0", mutual:cli("EXISTS", key))
        code, out = cli("status", key)
        assert.equal(1, code, out)
    end)
end)
