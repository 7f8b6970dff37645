-- The lock API in every phase of docs/openresty.md's table "Which phase
-- uses which transport", inside Debian's nginx with the Lua module: a wait
-- for a held key, try_acquire, extend, release, with_lock, permits,
-- readers and a writer, a group, and a Redlock over 3 servers, with the
-- clients made in init_by_lua (spec/openresty/phases.lua). Each works, and
-- nginx logs no error. Runs in the Lua 5.4 suite only, as spec/41 does.
local helper = require "helper"
local nginx = require "openresty.nginx"

local missing = nginx.missing()
if not missing and ((os.getenv("REDLOCK_LUA") or "lua5.4") ~= "lua5.4" or os.getenv("REDLOCK_BUILD")) then
    missing = "nginx's specs run in the Lua 5.4 suite"
end

-- What each phase's run must come to (spec/openresty/phases.lua's steps),
-- over the transport the table names.
local STEPS = table.concat({
    "hold=ok", "acquire_waited=ok", "fence_after_holder=true", "try_held=locked", "extend=ok", "release=ok",
    "try_acquire=ok", "release_try=ok", "with_lock=ok", "permits=ok,ok", "permit_waited=ok", "readers=ok,ok",
    "writer_refused=locked", "writer=ok", "group=ok", "group_excludes=locked", "group_release=ok",
    "redlock_hold=ok", "redlock_waited=ok", "redlock_extend=ok", "redlock_release=ok", "redlock_with_lock=ok",
}, " ")
local COSOCKETS = "transport=cosocket " .. STEPS
local BLOCKING = "transport=blocking " .. STEPS

-- The handshake phases need a TLS server of their own (PORT_NEXT): TLS 1.2
-- without tickets, one request per connection, so that curl's second
-- request offers the first one's session ID (ssl_session_fetch).
local function http(certs)
    return string.format([[
    init_worker_by_lua_block { require("phases").run("init_worker") }
    exit_worker_by_lua_block { require("phases").exit_worker() }
    ssl_session_fetch_by_lua_block { require("phases").run("ssl_session_fetch") }
    ssl_session_store_by_lua_block { require("phases").run("ssl_session_store") }
    upstream phases_backend {
        server 127.0.0.1:1;
        balancer_by_lua_block { require("phases").balancer() }
    }
    server {
        listen 127.0.0.1:@PORT_NEXT@ ssl;
        ssl_certificate %s;
        ssl_certificate_key %s;
        ssl_protocols TLSv1.2;
        ssl_session_tickets off;
        keepalive_timeout 0;
        ssl_client_hello_by_lua_block { require("phases").run("ssl_client_hello") }
        ssl_certificate_by_lua_block { require("phases").run("ssl_certificate") }
        server_rewrite_by_lua_block { require("phases").run("server_rewrite") }
        location = /health { return 200 "ok\n"; }
    }]], certs.server_crt, certs.server_key)
end

local SERVER = [[
        location = /report { content_by_lua_block { require("phases").report() } }
        location = /set {
            set_by_lua_block $phases_set { return require("phases").run("set") }
            return 200 "$phases_set\n";
        }
        location = /requests {
            rewrite_by_lua_block { require("phases").run("rewrite") }
            access_by_lua_block { require("phases").run("access") }
            content_by_lua_block { require("phases").content() }
        }
        location = /filters {
            header_filter_by_lua_block { require("phases").run("header_filter") }
            body_filter_by_lua_block { require("phases").run("body_filter") }
            log_by_lua_block { require("phases").run("log") }
            content_by_lua_block { ngx.say("ok") }
        }
        location = /balancer { proxy_pass http://phases_backend/health; }]]

describe("inside nginx, the lock API in every phase", function()
    if missing then
        pending("skipped: " .. missing)
        return
    end
    local ngx_server
    setup(function()
        assert(io.open("build/jit/redlock/core.so"), "build/jit/redlock/core.so is missing: run `make build-jit`")
            :close()
        local redis = helper.start_server()
        local ports = { redis.port, helper.start_server().port, helper.start_server().port }
        ngx_server = nginx.start { workers = 1, redis = redis, lua_path = "@REPO@/spec/openresty/?.lua;",
            http = http(helper.tls_certs()), server = SERVER,
            init = string.format('require("phases").init({ %s }, %q)', table.concat(ports, ", "),
                helper.key("phases")) }
    end)
    teardown(function()
        if ngx_server then ngx_server:stop() end
        helper.stop_all()
    end)

    local function report(phase)
        local body, code = ngx_server:get("/report?phase=" .. phase, 30)
        assert.equal(200, code, body)
        return body
    end

    it("init_by_lua and init_worker_by_lua (blocking)", function()
        assert.equal(BLOCKING, report("init"))
        assert.equal(BLOCKING, report("init_worker"))
        assert.same({}, ngx_server:errors())
    end)

    it("set_by_lua (blocking)", function()
        local body, code = ngx_server:get("/set", 30)
        assert.equal(200, code, body)
        assert.equal(BLOCKING, body)
        assert.same({}, ngx_server:errors())
    end)

    it("rewrite, access and content_by_lua and a timer (cosockets)", function()
        local body, code = ngx_server:get("/requests", 30)
        assert.equal(200, code, body)
        for _, phase in ipairs { "rewrite", "access", "content", "timer" } do
            assert.equal(COSOCKETS, report(phase), phase)
        end
        assert.same({}, ngx_server:errors())
    end)

    it("header_filter, body_filter and log_by_lua (blocking)", function()
        local body, code = ngx_server:get("/filters", 30)
        assert.equal(200, code, body)
        for _, phase in ipairs { "header_filter", "body_filter", "log" } do
            assert.equal(BLOCKING, report(phase), phase)
        end
        assert.same({}, ngx_server:errors())
    end)

    it("balancer_by_lua (blocking)", function()
        local body, code = ngx_server:get("/balancer", 30)
        assert.equal(200, code, body)
        assert.equal(BLOCKING, report("balancer"))
        assert.same({}, ngx_server:errors())
    end)

    it("ssl_certificate and server_rewrite_by_lua (cosockets); ssl_client_hello, ssl_session_fetch and "
        .. "ssl_session_store_by_lua (blocking)", function()
        -- two connections: the second offers the first one's session
        local url = string.format("https://127.0.0.1:%d/health", ngx_server.port + 1)
        local out = nginx.read_cmd(string.format("curl -skS --tlsv1.2 --tls-max 1.2 --max-time 60 %s %s 2>&1",
            helper.quote(url), helper.quote(url)))
        assert.equal("ok\nok\n", out)
        for _, phase in ipairs { "ssl_certificate", "server_rewrite" } do
            assert.equal(COSOCKETS, report(phase), phase)
        end
        for _, phase in ipairs { "ssl_client_hello", "ssl_session_fetch", "ssl_session_store" } do
            assert.equal(BLOCKING, report(phase), phase)
        end
        assert.same({}, ngx_server:errors())
    end)

    it("exit_worker_by_lua (blocking), as nginx stops", function()
        local dir = ngx_server.dir
        ngx_server:stop()
        assert.equal(BLOCKING .. "\n", nginx.read(dir .. "/exit_worker.txt"))
        assert.same({}, ngx_server:errors())
    end)
end)
