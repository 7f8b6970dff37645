-- Topologies inside a real nginx (Debian's nginx + the Lua module) that
-- spec/conformance_cases.lua's nginx driver does not reach: a Redis
-- Cluster over TLS (TLS-only nodes, with the cluster bus and replication
-- over TLS too: every byte nginx exchanges with the Cluster is TLS), and a
-- Redlock renewed from nginx timers (redlock.cosocket.renew) while its
-- masters die. spec/openresty/topologies.lua has the handlers. Like
-- spec/41, it runs once, in the Lua 5.4 suite (nginx runs its own LuaJIT
-- with build/jit's core).
local helper = require "helper"
local nginx = require "openresty.nginx"

local missing = nginx.missing()
local JIT_CORE = "build/jit/redlock/core.so"

local SERVER = [[
        location = /cluster_tls { content_by_lua_block { require("topologies").cluster_tls() } }
        location = /cluster_tls_set {
            set_by_lua_block $cluster_tls_set { return require("topologies").cluster_tls_set() }
            return 200 "$cluster_tls_set\n";
        }
        location = /redlock_renew { content_by_lua_block { require("topologies").redlock_renew() } }
        location = /renewal { content_by_lua_block { require("topologies").renewal() } }]]

local function lines(body)
    local t = {}
    for k, v in (body or ""):gmatch("([%w_]+)=([^\n]*)") do t[k] = v end
    return t
end

local function enc(s) return (tostring(s):gsub("[^%w]", function(ch) return string.format("%%%02X", ch:byte()) end)) end

describe("OpenResty: topologies inside nginx", function()
    if missing then
        pending("skipped: " .. missing)
        return
    end

    local certs, redis, ngx_server
    setup(function()
        assert(io.open(JIT_CORE), JIT_CORE .. " is missing: run `make build-jit`"):close()
        certs = helper.tls_certs()
        redis = helper.start_server() -- (the template's own client's)
        -- one worker: a lock, a renewal and a subscriber are the worker's
        ngx_server = nginx.start { workers = 1, redis = redis, server = SERVER,
            http = string.format("lua_ssl_trusted_certificate %s;\n    lua_ssl_verify_depth 2;", certs.ca),
            lua_path = "@REPO@/spec/openresty/?.lua;" }
        -- (the refused connects to servers a test killed, and the reply a
        -- renewal round was reading from one as it was killed)
        ngx_server:expect_error("connect() failed (111")
        ngx_server:expect_error("recv() failed (104: Connection reset by peer), context: ngx.timer")
    end)
    teardown(function()
        if ngx_server then ngx_server:stop() end
        helper.stop_all()
    end)

    local function errors() return ngx_server:errors() end -- (ngx_server: set in setup)

    describe("a Redis Cluster over TLS (3 masters, no plaintext port)", function()
        local cluster, voters, query
        -- a key of the slot whose master is (or, other = true, is not) node
        local function key_on(node, other, prefix)
            for i = 1, 1000 do
                local key = prefix .. helper.key() .. i
                local owner = helper.cluster_owner(cluster, key)
                if (owner == node) ~= (other == true) then return key, owner end
            end
        end
        local function call(op, key, extra)
            return lines((ngx_server:get(string.format("/cluster_tls?op=%s&key=%s&%s%s", op, enc(key), query,
                extra or ""))))
        end
        setup(function()
            cluster = helper.start_cluster(3, 0, { tls = certs })
            voters = { helper.start_server(), helper.start_server() }
            query = string.format("seeds=%s&ca=%s", enc(cluster.seeds[1] .. "," .. cluster.seeds[2]), enc(certs.ca))
        end)

        it("locks on each master over cosockets, a handshake per node, and follows MOVED to a node "
            .. "it had no connection to", function()
            -- a key on every master: three TLS connections from the map
            local keys = {}
            for i, node in ipairs(cluster.nodes) do
                local key = key_on(node, false, "tls" .. i .. ":")
                local t = call("try", key)
                assert.equal("cosocket", t.transport, t.err)
                assert.equal(t.token, node:cli("GET", key))
                keys[i] = key
            end
            -- the first key's slot moves (MIGRATE over TLS) after the
            -- worker's map was loaded: its extend meets MOVED, to the
            -- master that holds it now
            local from, slot = helper.cluster_owner(cluster, keys[1])
            local to = cluster.nodes[2]
            helper.move_slot(cluster, slot, from, to)
            assert.equal("ok", call("extend", keys[1]).extend)
            assert.is_true(tonumber(to:cli("PTTL", keys[1])) > 30000)
            -- a new lock in that slot goes there too
            local key = "{" .. keys[1] .. "}new"
            local t = call("try", key)
            assert.equal(t.token, to:cli("GET", key), t.err)
            for _, k in ipairs({ keys[1], keys[2], keys[3], key }) do
                assert.equal("ok", call("release", k).release)
                assert.equal("0", helper.cluster_owner(cluster, k):cli("EXISTS", k))
            end
            assert.same({}, errors())
        end)

        it("runs the lock API, with_lock renewed by the C thread (over TLS, ca_file) and a lock "
            .. "renewed from nginx timers", function()
            local key = key_on(cluster.nodes[3], false, "api:")
            local t = call("api", key)
            assert.same({ acquire = "ok", again = "locked", extend = "ok", release = "ok",
                release_again = "not owner", with_lock = "locked", after = "free", transport = "cosocket",
                timers = "locked", timers_release = "ok", timers_lost = "nil", timers_after = "free" }, t)
            assert.equal("0", cluster.nodes[3]:cli("EXISTS", key))
            assert.same({}, errors())
        end)

        it("is one voter of a Redlock with two plain servers (the fan-out's light threads)", function()
            local key = key_on(cluster.nodes[2], false, "rl:")
            local members = "&members=" .. voters[1].port .. "," .. voters[2].port
            local t = call("try", key, members)
            assert.equal("cosocket", t.transport, t.err)
            assert.equal(t.token, cluster.nodes[2]:cli("GET", key))
            assert.equal(t.token, voters[1]:cli("GET", key))
            assert.equal(t.token, voters[2]:cli("GET", key))
            assert.equal("ok", call("release", key).release)
            assert.equal("0", cluster.nodes[2]:cli("EXISTS", key))
            assert.same({}, errors())
        end)

        it("wakes a waiter through the worker's subscriber, on a node over TLS", function()
            local key = key_on(cluster.nodes[1], true, "notified:")
            local holder = require("redlock").new { servers = { cluster.url }, tls = { ca_file = certs.ca } }
            local lock = assert(holder:acquire(key, { ttl = 5000 }))
            -- the first waiter starts the worker's subscriber, and polls
            local path = string.format("/cluster_tls?op=wait&key=%s&%s&wait=", enc(key), query)
            assert.matches("^timeout", (ngx_server:get(path .. "50")))
            -- this one's polling would sleep 10 s, past its wait of 3 s
            local waiter = ngx_server:bg(path .. "3000")
            helper.sleep(300)
            assert.is_true(lock:release())
            assert.equal("taken", (waiter.wait()))
            holder:close()
            assert.same({}, errors())
        end)

        it("locks over the C core's TLS Cluster connection where nginx has no cosockets (set_by_lua)", function()
            local key, owner = key_on(cluster.nodes[1], true, "set:")
            local t = lines((ngx_server:get(string.format("/cluster_tls_set?key=%s&%s", enc(key), query))))
            assert.equal("set", t.phase, t.err)
            assert.equal(t.token, owner:cli("GET", key))
            owner:cli("DEL", key)
            assert.same({}, errors())
        end)
    end)

    describe("a Redlock renewed from nginx timers (3 masters)", function()
        local function renewal() return lines((ngx_server:get("/renewal"))) end
        local function ports(list)
            local p = {}
            for i, s in ipairs(list) do p[i] = s.port end
            return table.concat(p, ",")
        end
        local function on_all(list, key, token)
            for _, s in ipairs(list) do
                if s:cli("GET", key) ~= token then return false end
            end
            return true
        end

        it("stays held past its ttl, keeps its majority when one master dies, and is reported lost "
            .. "when the majority is gone", function()
            local masters = { helper.start_server(), helper.start_server(), helper.start_server() }
            local key = helper.key("renew")
            local req = ngx_server:bg(string.format("/redlock_renew?ports=%s&key=%s&ttl=%d&ms=20000",
                ports(masters), enc(key), helper.ms(600)))
            local token
            assert(helper.eventually(5000, function()
                token = masters[1]:cli("GET", key)
                return token ~= "" and on_all(masters, key, token)
            end), "the lock was not taken on the three masters")
            -- past its ttl: renewed on all three
            helper.sleep(helper.ms(1000))
            assert.is_true(on_all(masters, key, token))
            assert.same({ active = "true", lost = "nil", err = "nil", lock_lost = "no" }, renewal())
            -- one master dies: two of three still renew it
            masters[1]:kill()
            helper.sleep(helper.ms(1000))
            assert.is_true(on_all({ masters[2], masters[3] }, key, token))
            local st = renewal()
            assert.equal("true", st.active)
            assert.equal("nil", st.lost)
            assert.equal("no", st.lock_lost)
            -- a second one dies: no majority can renew it; once its
            -- validity runs out, the renewal says it is lost
            masters[2]:kill()
            local body, code = req.wait()
            assert.equal(200, code, body)
            local t = lines(body)
            assert.equal("true", t.lost, body)
            assert.equal("yes", t.on_lost, body)
            assert.equal("expired", t.lock_lost, body)
            assert.equal("0", t.remaining, body)
            assert.matches("no quorum", t.err, 1, true)
            -- the release deletes what is left on the live master, and
            -- cannot say it released a majority
            assert.equal("no quorum", t.release, body)
            assert.equal("0", masters[3]:cli("EXISTS", key))
            st = renewal()
            assert.equal("false", st.active)
            assert.equal("true", st.lost)
            assert.same({}, errors())
        end)

        it("ends its timers with the request that held the lock: the keys expire on every master", function()
            local masters = { helper.start_server(), helper.start_server(), helper.start_server() }
            local key = helper.key("renew")
            assert.equal("taken", (ngx_server:get(string.format("/redlock_renew?ports=%s&key=%s&ttl=300&gone=1",
                ports(masters), enc(key)))))
            assert(helper.eventually(5000, function()
                for _, s in ipairs(masters) do
                    if s:cli("EXISTS", key) ~= "0" then return false end
                end
                return true
            end), "still renewed after its request ended")
            local st = renewal()
            assert.equal("false", st.active)
            assert.matches("its holder ended without releasing the lock", st.err, 1, true)
            assert.same({}, errors())
        end)
    end)
end)
