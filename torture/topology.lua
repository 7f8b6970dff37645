--- The servers of a torture run: each data server in a network namespace
-- of its own (spec/netns.lua), joined to the clients' namespace (this
-- process's) and to the client namespaces made for partitions; each
-- runs the libc-malloc redis-7.4.1 of ../shared/servers under
-- libfaketime, its wall clock read from a file of its own (moved by the
-- clock faults; the monotonic clock is left alone, as an NTP step does),
-- with AOF (appendfsync always) so a restart may keep its data or lose
-- it. Started and stopped through spec/helper.lua; everything it makes
-- has a pid or stop file under the run's directory.
local helper = require "helper"
local netns = require "netns"

local _M = {}

local function first_line(cmd) return (helper.read_cmd(cmd .. " 2>/dev/null"):match("[^\n]+")) end

local SERVERS = os.getenv("REDLOCK_SERVERS") or "../shared/servers"
local SERVERS_DIR = helper.read_cmd("cd " .. helper.quote(SERVERS) .. " 2>/dev/null && pwd"):gsub("%s+$", "")
local BIN = (SERVERS_DIR ~= "" and SERVERS_DIR or SERVERS) .. "/redis-7.4.1/redis-server"
local LIBFAKETIME = first_line("ls /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1")

--- Why the run cannot start here, or nil.
function _M.missing()
    if not first_line("ls " .. helper.quote(BIN)) then return "no libc-malloc redis-server at " .. BIN end
    if not LIBFAKETIME then return "no libfaketime (Debian's faketime)" end
    return netns.missing()
end

local Topo = {}
Topo.__index = Topo

function _M.new()
    local self = setmetatable({ net = netns.new(), servers = {}, spaces = {}, client_spaces = {} }, Topo)
    -- a redis-server that puts itself under libfaketime when its
    -- environment names a clock file (servers do; redis-cli and the
    -- version probe do not)
    self.wrap = helper.fresh_dir("wrap")
    local f = assert(io.open(self.wrap .. "/redis-server", "w"))
    f:write("#!/bin/sh\n",
        "if [ -n \"$TORTURE_CLOCK\" ]; then\n",
        "  exec env LD_PRELOAD=", LIBFAKETIME, " FAKETIME_TIMESTAMP_FILE=\"$TORTURE_CLOCK\" FAKETIME_NO_CACHE=1 ",
        "FAKETIME_DONT_FAKE_MONOTONIC=1 ", helper.quote(BIN), " \"$@\"\n",
        "fi\n",
        "exec ", helper.quote(BIN), " \"$@\"\n")
    f:close()
    assert(os.execute("chmod +x " .. helper.quote(self.wrap .. "/redis-server")))
    return self
end

--- A namespace joined to the clients' (this process's) and to every
-- client namespace made so far.
function Topo:space(name, opts)
    local space = self.net:space(name, opts)
    self.spaces[#self.spaces + 1] = space
    for _, c in ipairs(self.client_spaces) do self.net:link(name, c.name) end
    return space
end

--- A client namespace: joined to every server namespace (not to the
-- clients' own: a client there reaches the resource by its unix socket).
function Topo:client_space(name)
    local space = self.net:space(name, { client = false })
    for _, s in ipairs(self.spaces) do self.net:link(s.name, name) end
    self.client_spaces[#self.client_spaces + 1] = space
    return space
end

local function write_file(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
end

--- Starts a data server `name` in a namespace of its own (or in
-- opts.space, shared). opts.config: more config lines; opts.persistent
-- (default true): AOF with fsync always. Returns its record: name,
-- server (spec/helper's), space, clock (the offset file).
function Topo:data_server(name, opts)
    opts = opts or {}
    local space = opts.space or self:space(name)
    local clock = helper.fresh_dir("clock") .. "/offset"
    write_file(clock, "+0\n")
    local config = netns.open_config { "enable-debug-command yes", "maxmemory-policy noeviction" }
    for _, l in ipairs(opts.config or {}) do config[#config + 1] = l end
    local server = helper.start_server {
        host = space.addr, exec = space.exec .. "env TORTURE_CLOCK=" .. clock .. " ",
        server_dir = self.wrap, config = config, persistent = opts.persistent ~= false,
    }
    local srv = { name = name, server = server, space = space, clock = clock }
    self.servers[#self.servers + 1] = srv
    self.servers[name] = srv
    return srv
end

--- "host:port" of a server record.
function _M.addr(srv) return srv.server.host .. ":" .. srv.server.port end

--- Moves a server's wall clock to `s` seconds from the real one.
function _M.set_clock(srv, s) write_file(srv.clock, string.format("%+.3f\n", s)) end

--- SIGKILL (as a crash).
function _M.kill(srv) srv.server:kill() end

--- Starts a server again on its address: with its AOF (keep) or without
-- (its append-only files deleted first: every key lost).
function _M.start(srv, keep)
    if not keep then os.execute("rm -rf " .. helper.quote(srv.server.dir .. "/appendonlydir")) end
    srv.server.fixed_port = true
    srv.server:start()
end

function _M.alive(srv) return helper.alive(srv.server.pid) end

--- Every namespace and veth removed (and what runs in them stopped).
function Topo:destroy() self.net:destroy() end

return _M
