-- TLS (rediss:// and the tls table): redis-server with --tls-port and
-- certificates made by openssl at test time (one set for the whole file).
local helper = require "helper"
local redlock = require "redlock"

describe("TLS", function()
    local certs, plain, mutual, expired, others
    setup(function()
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
                                                others[2]:tls_url() }, tls = tls }
        local ok, taken = c:with_lock(key, { ttl = 300 }, function()
            helper.sleep(900) -- three ttls: only the renewal thread keeps it
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
            plain.tls_port, "connection")
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
