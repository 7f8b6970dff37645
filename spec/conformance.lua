--- The conformance suite's fixture and drivers (spec/conformance_cases.lua).
-- The fixture: one real Redis Cluster (3 masters, 1 replica each), one
-- Sentinel group (a master, its replica, three sentinels), two plain servers
-- (the other voters of a Redlock; the first with a replica) and, where it
-- can run, one nginx. The
-- drivers take locks through each path of the library the same way, and
-- each answers an observation { ok, token, err, code } that a case checks:
--   plain   the Lua client over the hiredis connection (csrc/drivers/conn.c,
--           cluster.c, sentinel.c)
--   acked   the same, waiting for a replica (replicas = 1): the script and
--           WAIT in one write, the request loop's tail (redlock_request)
--   fanout  a Redlock of the topology and the two plain servers: the
--           fan-out of csrc/drivers/fanout.c and lua/redlock/quorum.lua; what is
--           observed is the topology's own vote
--   renew   the renewal thread (csrc/drivers/renew.c): a lock held with renew =
--           true through the case's event, observed afterwards
--   renew_redlock   the same for a Redlock of the topology and one plain
--           server (a majority of 2): the thread's rounds go through the
--           fan-out
--   nginx   the cosockets inside nginx (lua/redlock/nginx/: cosocket.lua,
--           conn.lua's request loop): spec/openresty/conform.lua
--   nginx_renew   the renewal from nginx timers (cosocket.renew): a lock
--           held in the worker through the case's event, observed
--           afterwards
local helper = require "helper"

local _M = {}

local function key_of(prefix) return helper.key("conf-" .. prefix) end
_M.key = key_of

-- "name=value" lines of an nginx answer into a table.
local function lines(body)
    local t = {}
    for k, v in (body or ""):gmatch("([%w_]+)=([^\n]*)") do t[k] = v end
    return t
end

local function enc(s)
    return (tostring(s):gsub("[^%w]", function(ch) return string.format("%%%02X", ch:byte()) end))
end

-- --- the fixture -----------------------------------------------------------

local NAME = "mymaster"

--- Starts the servers every case shares. Returns the fixture table.
function _M.start()
    local fx = {}
    fx.cluster = helper.start_cluster(3, 1)
    fx.voters = { helper.start_server(), helper.start_server() }
    -- (the renewal's Redlock voter acknowledges writes too: replicas = 1)
    fx.voter_replica = helper.start_replica(fx.voters[1])
    fx.master = helper.start_server()
    fx.replica = helper.start_replica(fx.master)
    fx.sentinels = {}
    for i = 1, 3 do fx.sentinels[i] = helper.start_sentinel({ [NAME] = fx.master }) end
    assert(helper.eventually(15000, function()
        for _, s in ipairs(fx.sentinels) do
            local out = s:cli("SENTINEL", "master", NAME)
            if not out:find("num%-other%-sentinels\n2") or not out:find("num%-slaves\n1") then return false end
        end
        return true
    end), "the sentinels did not discover each other and the replica")
    fx.name = NAME
    return fx
end

--- A redis+sentinel:// URL for the sentinels given (servers), in that order.
function _M.sentinel_url(list, name)
    local addrs = {}
    for i, s in ipairs(list) do addrs[i] = "127.0.0.1:" .. s.port end
    return "redis+sentinel://" .. table.concat(addrs, ",") .. "/" .. (name or NAME)
end

--- The Cluster's masters now (nodes alive that say so).
function _M.masters(fx)
    local out = {}
    for _, node in ipairs(fx.cluster.nodes) do
        if helper.alive(node.pid) and node:cli("ROLE"):match("^master") then out[#out + 1] = node end
    end
    return out
end

--- A master of the Cluster other than node.
function _M.other_master(fx, node)
    for _, m in ipairs(_M.masters(fx)) do
        if m ~= node then return m end
    end
end

--- The replica of a Cluster master.
function _M.replica_of(fx, master)
    for _, node in ipairs(fx.cluster.nodes) do
        if node ~= master and helper.alive(node.pid) then
            local role = node:cli("ROLE")
            if role:match("^slave") and role:match("\n(%d+)\n") == tostring(master.port) then return node end
        end
    end
end

--- The node of the Cluster that the first seed of fx.cluster.url is.
function _M.first_seed(fx)
    local port = tonumber(fx.cluster.seeds[1]:match(":(%d+)$"))
    for _, node in ipairs(fx.cluster.nodes) do
        if node.port == port then return node end
    end
end

--- The Sentinel-managed master and its replica, as the servers say now.
function _M.sentinel_roles(fx)
    if fx.master:cli("ROLE"):match("^master") then return fx.master, fx.replica end
    return fx.replica, fx.master
end

--- Calls of a command on a server (INFO commandstats).
function _M.calls(server, cmd)
    return tonumber(server:cli("INFO", "commandstats"):match("cmdstat_" .. cmd .. ":calls=(%d+)")) or 0
end

--- Runs a shell command in the background after ms (redis-cli and the
-- like, never under a sanitizer's preloaded runtime).
function _M.later(ms, cmd) helper.later(ms, "env -u LD_PRELOAD sh -c " .. helper.quote(cmd)) end

--- redis-cli's command line for a node, for _M.later.
function _M.cli_cmd(node, ...)
    local args = { "redis-cli", "-h", "127.0.0.1", "-p", tostring(node.port) }
    for _, a in ipairs({ ... }) do args[#args + 1] = helper.quote(a) end
    return table.concat(args, " ")
end

--- The replies of commands sent to a node after ASKING (a slot it imports).
function _M.asking(node, ...)
    local conn = require("redlock.core").conn({ host = "127.0.0.1", port = node.port })
    assert(conn:command("ASKING"))
    local out = {}
    for i, cmd in ipairs({ ... }) do
        out[i] = assert(conn:command((table.unpack or unpack)(cmd)))
        if i < select("#", ...) then assert(conn:command("ASKING")) end
    end
    conn:close()
    return (table.unpack or unpack)(out)
end

-- --- the drivers -----------------------------------------------------------

local redlock = require "redlock"

--- A server as the case gives it: ctx.url, or, when the case sets how often
-- a Sentinel master is checked (ctx.sentinel_check), its table form.
local function server_of(ctx)
    if not ctx.sentinel_check then return ctx.url end
    local addrs, name = ctx.url:match("^redis%+sentinel://([^/]+)/(.+)$")
    local sentinels = {}
    for a in addrs:gmatch("[^,]+") do sentinels[#sentinels + 1] = a end
    return { sentinels = sentinels, master_name = name, sentinel_check = ctx.sentinel_check }
end
_M.server_of = server_of

-- What every driver's client is made with (the same for all), and the
-- case's replica acknowledgement (ctx.replicas, ctx.replica_timeout).
local function client_opts(ctx, servers)
    local o = { servers = servers, retry_delay = 5, retry_jitter = 0, server_backoff = 0 }
    if ctx.replicas then o.replicas, o.replica_timeout = ctx.replicas, ctx.replica_timeout end
    return o
end

local function observe_lock(lock, err, code)
    if not lock then return { ok = false, err = err, code = code } end
    return { ok = true, token = lock.token, lock = lock }
end

local plain = { name = "plain" }

function plain.open(_, ctx) ctx.client = redlock.new(client_opts(ctx, { server_of(ctx) })) end
function plain.acquire(_, ctx, key, ttl)
    return observe_lock(ctx.client:try_acquire(key, { ttl = ttl }))
end
function plain.extend(_, _, held, ttl)
    local ok, err, code = held.lock:extend(ttl)
    return { ok = ok == true, err = err, code = code, token = held.token }
end
function plain.release(_, _, held) return held.lock:release() end
function plain.close(_, ctx) if ctx.client then ctx.client:close() end end

-- The plain client waiting for one replica's acknowledgement (replicas = 1):
-- every script goes with WAIT in one write (csrc/drivers/conn.c's request loop).
local acked = { name = "acked" }

function acked.open(_, ctx)
    local o = client_opts(ctx, { server_of(ctx) })
    o.replicas, o.replica_timeout = 1, ctx.replica_timeout or 2000
    ctx.client = redlock.new(o)
end
acked.acquire = plain.acquire
acked.extend = plain.extend
acked.release = plain.release
acked.close = plain.close

-- A Redlock of the topology and the two plain servers: the topology's own
-- vote is what counts. It failed where the fan-out told a server_error
-- event for it (redlock.events), else it granted the lock.
local fanout = { name = "fanout" }

function fanout.open(fx, ctx)
    local o = client_opts(ctx, { server_of(ctx), fx.voters[1]:url(), fx.voters[2]:url() })
    -- each voter's time limit as the other drivers' (their timeout): a cell
    -- then differs by its rule, not by its budget; unless the case asks
    -- for the default one (ttl / 200, 10 to 50 ms)
    if not ctx.default_budget then o.server_timeout = 1000 end
    ctx.client = redlock.new(o)
    ctx.voter = ctx.client.servers[1].name
end
function fanout.acquire(_, ctx, key, ttl)
    local mine
    local lock, err, code = ctx.client:try_acquire(key, { ttl = ttl, on_event = function(ev)
        if ev.type == "server_error" and ev.server == ctx.voter then mine = ev end
    end })
    if mine then
        if lock then lock:release() end
        return { ok = false, err = mine.err, code = mine.code }
    end
    return observe_lock(lock, err, code)
end
fanout.extend = plain.extend
fanout.release = plain.release
fanout.close = plain.close

-- The renewal thread: hold() takes the lock with renew = true before the
-- event; observe() says afterwards whether the thread kept it.
local renew = { name = "renew", renews = true }

renew.open = plain.open
renew.close = plain.close
renew.release = plain.release
function renew.hold(_, ctx, key, ttl, warm)
    local lock, err = ctx.client:acquire(key, { ttl = ttl, renew = true })
    assert(lock, err)
    if warm then
        -- one renewal made: the thread knows the topology before the event
        assert(helper.eventually(ttl, function() return select(3, lock.renewal:state()) >= 1 end),
            "no renewal within a ttl")
    end
    return { ok = true, token = lock.token, lock = lock }
end
function renew.observe(_, _, held)
    local lock = held.lock
    local lost, why = lock:lost()
    local _, _, _, failures, _, err = lock.renewal:state()
    return { ok = not lost, token = held.token, err = lost and (tostring(why) .. ": " .. tostring(err)) or err,
        lock = lock, failures = failures }
end

-- The renewal thread of a Redlock of two, the topology and one plain server
-- (a majority of 2: the lock stays only while the topology renews it too),
-- whose rounds go through the fan-out of csrc/drivers/fanout.c from the thread.
local renew_redlock = { name = "renew_redlock", renews = true }

function renew_redlock.open(fx, ctx)
    local o = client_opts(ctx, { server_of(ctx), fx.voters[1]:url() })
    if not ctx.default_budget then o.server_timeout = 1000 end -- (as fanout's)
    ctx.client = redlock.new(o)
end
renew_redlock.hold = renew.hold
renew_redlock.observe = renew.observe
renew_redlock.release = plain.release
renew_redlock.close = plain.close

-- nginx: one worker, spec/openresty/conform.lua; every cell a client of its
-- own in the worker (client=<id>). Holds its locks in the worker.
local nginx = { name = "nginx" }
local nginx_mod -- spec/openresty/nginx.lua, when nginx can run

function nginx.skip()
    local ok, mod = pcall(require, "openresty.nginx")
    if not ok then return "openresty.nginx: " .. tostring(mod) end
    local missing = mod.missing()
    if not missing and not io.open("build/jit/redlock/core.so") then
        missing = "build/jit/redlock/core.so is missing: run `make build-jit`"
    end
    nginx_mod = mod
    return missing
end

local ngx_server
function nginx.start(fx)
    if ngx_server then return end
    ngx_server = nginx_mod.start {
        workers = 1, redis = fx.voters[1],
        http = "lua_shared_dict redlock_sentinel 1m;",
        server = [[
        location = /conform { content_by_lua_block { require("conform").run() } }]],
        lua_path = "@REPO@/spec/openresty/?.lua;",
    }
end
function nginx.stop()
    if ngx_server then ngx_server:stop() end
    ngx_server = nil
end
--- The error log's Lua failures (a raised error, an aborted light thread):
-- not the refused connects and timeouts that the cases cause on purpose.
function nginx.errors()
    local out = {}
    for _, line in ipairs(ngx_server and ngx_server:errors() or {}) do
        if line:find("runtime error", 1, true) or line:find("aborted", 1, true) or not line:find("%[error%]") then
            out[#out + 1] = line
        end
    end
    return out
end

local cell_seq = 0
local function ngx_call(query)
    local body, code = ngx_server:get("/conform?" .. query, 30)
    if code ~= 200 then return { ok = false, err = "nginx answered " .. tostring(code) .. ": " .. tostring(body) } end
    local t = lines(body)
    return { ok = t.token ~= nil or t.ok == "true", token = t.token, err = t.err, code = t.code,
        transport = t.transport }
end
function nginx.open(fx, ctx)
    nginx.start(fx)
    cell_seq = cell_seq + 1
    ctx.ngx_client = "c" .. cell_seq
end
-- The client's settings a case adds, as query arguments (spec/openresty/conform.lua).
local function ngx_settings(ctx)
    local q = ""
    if ctx.replicas then q = q .. string.format("&replicas=%d&replica_timeout=%d", ctx.replicas, ctx.replica_timeout) end
    if ctx.sentinel_check then q = q .. "&check=" .. ctx.sentinel_check end
    return q
end
function nginx.acquire(_, ctx, key, ttl)
    local obs = ngx_call(string.format("op=acquire&client=%s&url=%s&key=%s&ttl=%d%s", ctx.ngx_client,
        enc(ctx.url), enc(key), ttl, ngx_settings(ctx)))
    if obs.ok then obs.key = key end
    assert(not obs.ok or obs.transport == "cosocket", "the lock did not go over cosockets")
    return obs
end
function nginx.extend(_, _, held, ttl)
    local obs = ngx_call(string.format("op=extend&key=%s&ttl=%d", enc(held.key), ttl))
    obs.token = held.token
    return obs
end
function nginx.release(_, _, held) return ngx_call("op=release&key=" .. enc(held.key)).ok end
function nginx.close() end

-- nginx's renewal from timers (redlock.cosocket.renew): hold() takes the
-- lock in the worker and renews it there (detached from the request),
-- observe() asks afterwards whether it was kept.
local nginx_renew = { name = "nginx_renew", renews = true }

nginx_renew.skip = nginx.skip
nginx_renew.open = nginx.open
nginx_renew.release = nginx.release
nginx_renew.close = nginx.close
nginx_renew.errors = nginx.errors
function nginx_renew.hold(_, ctx, key, ttl, warm)
    local obs = ngx_call(string.format("op=hold&client=%s&url=%s&key=%s&ttl=%d%s%s", ctx.ngx_client,
        enc(ctx.url), enc(key), ttl, warm and "&warm=1" or "", ngx_settings(ctx)))
    assert(obs.ok, obs.err)
    assert(obs.transport == "cosocket", "the lock did not go over cosockets")
    obs.key = key
    return obs
end
function nginx_renew.observe(_, _, held)
    local body, code = ngx_server:get("/conform?op=observe&key=" .. enc(held.key), 30)
    assert(code == 200, "nginx answered " .. tostring(code) .. ": " .. tostring(body))
    local t = lines(body)
    local ok = t.held == "true"
    -- the renewal's own report and lock:lost() tell one story
    assert(t.agree == "true", "the renewal's handle and lock:lost() disagree: " .. body)
    return { ok = ok, token = held.token, key = held.key,
        err = ok and t.err or (tostring(t.why) .. ": " .. tostring(t.err)), failures = t.err and 1 or 0 }
end

-- (the request drivers first: in a case with one event for all, the
-- renewal drivers' waits come after their calls)
_M.drivers = { plain, acked, fanout, nginx, renew, renew_redlock, nginx_renew }

return _M
