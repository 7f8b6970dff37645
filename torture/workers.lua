--- The workload's processes: plain Lua clients (torture/client.lua), the
-- command's loop (torture/cli_client.lua, in a process group of its own:
-- the loop, the redlock process and the command it runs), and nginx
-- (spec/openresty/nginx.lua) with its workers running torture/ngx_hold.lua
-- and shell loops of curl driving them. Each has a pid or stop file in
-- the run's directory, so torture/run.sh stops it even when the run dies.
-- A process: name, pausable, signal(sig[, pid]) -> the pid signalled,
-- client_of(pid) -> the client name its history uses, alive().
local helper = require "helper"
local nginx = require "openresty.nginx"
local core = require "redlock.core"

local format, quote = string.format, helper.quote

local _M = {}

local LUA = os.getenv("TORTURE_LUA") or "lua5.4"
local REPO = os.getenv("TORTURE_REPO") or "."

local function write_file(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
end

local function sh(cmd)
    local ok = os.execute(cmd)
    return ok == true or ok == 0
end

-- The start time of process pid (clock ticks since boot), nil when there
-- is none: what tells a process from a later one given the same pid.
local function started(pid)
    local f = io.open("/proc/" .. pid .. "/stat")
    if not f then return nil end
    local stat = f:read("*a")
    f:close()
    -- (the fields after "pid (comm) ": the start time is the 20th)
    local n = 0
    for field in (stat:match("^.*%) (.*)$") or ""):gmatch("%S+") do
        n = n + 1
        if n == 20 then return field end
    end
    return nil
end

-- Starts cmd in the background (group: in a session of its own, killed as
-- a group); its pid (the command's own: sh execs it) in a pid file.
local function spawn(name, cmd, group)
    local dir = helper.fresh_dir("proc-" .. name)
    local line = (group and "setsid " or "") .. cmd
    local pid = helper.read_cmd("sh -c " .. quote(line .. " >" .. dir .. "/out 2>&1 </dev/null & echo $!"))
        :match("%d+")
    write_file(dir .. "/pid", pid .. "\n")
    if group then
        -- (`kill -SIG -PGID`: dash, /bin/sh here, takes no `--`)
        write_file(dir .. "/stop", format("kill -CONT -%s 2>/dev/null; kill -KILL -%s 2>/dev/null\n", pid, pid))
    end
    return pid, dir
end

-- A process of the workload. Signals reach only it (or its group): a pid
-- is reused once its process is gone (pid_max may be 32768), and a signal
-- sent to a client that ended would hit whatever process got its pid,
-- such as another suite's server. A gone group leader's pid still names
-- its group while any of it lives (Linux reuses no live group's id).
local function proc(name, pid, dir, group)
    local p = { name = name, pid = pid, dir = dir, group = group }
    local start = started(pid)
    local function ours()
        local now = started(pid)
        if now == nil then return group and "gone" or false end
        return now == start
    end
    function p.signal(sig, which)
        which = which or pid
        if which == pid and not ours() then return which end
        sh(format("kill -%s %s%s 2>/dev/null", sig, group and "-" or "", which))
        return which
    end
    function p.alive() return ours() == true and helper.alive(pid) end
    function p.client_of() return name end
    return p
end

--- A plain Lua client, in namespace space (a client namespace) or here.
function _M.plain(ctx, name, space)
    local prefix = space and ("env -u LD_PRELOAD " .. space.exec) or ""
    local pid, dir = spawn(name, prefix .. LUA .. " " .. quote(REPO .. "/torture/client.lua") .. " "
        .. quote(ctx.config_path) .. " " .. name)
    local p = proc(name, pid, dir)
    p.pausable, p.client = true, true
    return p
end

--- The command's loop.
function _M.cli(ctx, name)
    local pid, dir = spawn(name, LUA .. " " .. quote(REPO .. "/torture/cli_client.lua") .. " "
        .. quote(ctx.config_path) .. " " .. name, true)
    local p = proc(name, pid, dir, true)
    p.pausable, p.client = true, true
    return p
end

-- The nginx configuration: the workload's handler at /hold.
local function conf(ctx, workers, port)
    local tree = os.getenv("TORTURE_TREE") or REPO
    local root = helper.read_cmd("id -u"):match("^0%s") and "user root;" or ""
    return format([[
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
%s
worker_processes %d;
pid nginx.pid;
error_log error.log warn;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path client_body;
    proxy_temp_path proxy;
    fastcgi_temp_path fastcgi;
    uwsgi_temp_path uwsgi;
    scgi_temp_path scgi;
    lua_package_path "%s/lua/?.lua;%s/lua/?/init.lua;%s/?.lua;;";
    lua_package_cpath "%s/build/jit/?.so;;";
    init_by_lua_block { require("torture.ngx_hold").init(%q) }
    server {
        listen 127.0.0.1:%d;
        location = /hold { content_by_lua_block { require("torture.ngx_hold").hold() } }
        location = /health { return 200 "ok\n"; }
    }
}
]], root, workers, tree, tree, REPO, tree, ctx.config_path, port)
end

-- The worker pids of an nginx master, sorted.
local function worker_pids(master)
    local pids = {}
    for pid in nginx.read_cmd("ps -o pid= --ppid " .. master):gmatch("%d+") do pids[#pids + 1] = tonumber(pid) end
    table.sort(pids)
    return pids
end

--- nginx with spec.workers workers and spec.streams loops of requests;
-- returns its processes (the workers, pausable; the loops).
function _M.nginx(ctx, spec)
    local why = nginx.missing()
    if why then error("nginx: " .. why) end
    local server = nginx.start_conf(function(port) return conf(ctx, spec.workers, port) end)
    ctx.nginx = server
    local out = {}
    for i = 1, spec.workers do
        local p = { name = "w" .. i, pausable = true }
        function p.signal(sig, which)
            if not which then
                local pids = worker_pids(server.pid)
                if #pids == 0 then return nil end
                which = pids[(i - 1) % #pids + 1]
            end
            sh(format("kill -%s %s 2>/dev/null", sig, which))
            return which
        end
        function p.alive() return true end
        function p.client_of(pid) return pid and ("ngx-" .. pid) or nil end
        out[#out + 1] = p
    end
    for i = 1, spec.streams do
        -- (with a focus in the plan, every other loop asks for it)
        local path = (ctx.mode.plan.focus and i % 2 == 0) and "/hold?focus=1" or "/hold"
        local loop = format("while [ ! -e %s ]; do curl -s -o /dev/null --max-time 60 %s; done",
            quote(ctx.stop), quote(server:url(path)))
        local pid, dir = spawn("curl" .. i, "sh -c " .. quote(loop), true)
        out[#out + 1] = proc("curl" .. i, pid, dir, true)
    end
    return out
end

--- Waits up to limit ms for every process to end once the stop file is
-- there; kills those left. Returns the names of the clients that had to
-- be killed.
function _M.stop_all(ctx, limit)
    local deadline = core.now() + limit
    local stuck = {}
    for _, p in ipairs(ctx.procs) do
        if p.dir then
            while p.alive() and core.now() < deadline do core.sleep(50) end
            if p.alive() then
                if p.client then stuck[#stuck + 1] = p.name end
                p.signal("CONT")
                p.signal("KILL")
            end
        end
    end
    if ctx.nginx then
        ctx.nginx:stop()
        ctx.ngx_crashes = _M.nginx_crashes(ctx.nginx)
        ctx.nginx = nil
    end
    return stuck
end

--- The lines of nginx's error log that say Lua raised (a request's or a
-- timer's handler aborted) or nginx itself failed ([alert], [crit],
-- [emerg]): a crash of the library inside nginx, whatever the request
-- saw.
function _M.nginx_crashes(server)
    local out = {}
    for line in (nginx.read(server.dir .. "/error.log") or ""):gmatch("[^\n]+") do
        if line:find("runtime error", 1, true) or line:find("thread aborted", 1, true)
            or line:find("%[alert%]") or line:find("%[crit%]") or line:find("%[emerg%]") then
            out[#out + 1] = line:sub(1, 400)
        end
    end
    return out
end

--- Stops whatever is left (after stop_all, or on the way out).
function _M.teardown(ctx)
    for _, p in ipairs(ctx.procs) do
        if p.dir then
            p.signal("CONT")
            p.signal("KILL")
        end
    end
    if ctx.nginx then ctx.nginx:stop() end
end

return _M
