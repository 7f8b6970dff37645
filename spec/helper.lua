--- Test helper: starts and stops real redis-server processes (never a mock),
-- each in its own directory under $REDLOCK_TEST_TMP, bound to 127.0.0.1 on a
-- free port, with a unix socket beside it; spawns worker processes.
-- spec/run.sh kills whatever is left when the suite ends, even on failure.
--
-- Which server: the redis-server of the folder $REDLOCK_SERVER_DIR (one of
-- ../shared/servers/*, say), else the first on PATH; a spec may name
-- another folder (start_server's server_dir). Any Redis from 2.4 and
-- Valkey: the helper asks the binary its version (redis-server --version)
-- and leaves out the config lines that version lacks where leaving them
-- out changes nothing (rename-command of a command it does not have,
-- `save ""` on 2.4, ...); a line that a spec needs and the version lacks
-- (ACL users, TLS, ...) is refused with an error saying so. Specs that need
-- what a version lacks call helper.needs(feature) inside the test: on
-- such a server the test ends as skipped (busted's pending), its message
-- naming the feature and the version (see FEATURES).
local _M = {}

local LUA = os.getenv("REDLOCK_LUA") or "lua5.4"

-- make test-valgrind: keep the collector running all the time, so that a
-- userdata collected while C still uses it shows up as an error.
local GC_STRESS = os.getenv("REDLOCK_GC_STRESS")
if GC_STRESS then
    collectgarbage("setpause", 0)
    collectgarbage("setstepmul", 1000)
    debug.sethook(function() collectgarbage() end, "", 20000)
end

--- ms for a test that counts on the clock (a renewal that must keep a
-- short ttl): n, or 4 n under valgrind (make test-valgrind), where the
-- client and its renewal thread run 20 to 50 times slower, or 2 n under
-- the sanitizers (make test-sanitize); at least REDLOCK_TIME_SCALE n,
-- which make test sets to 2 for every suite (each shares the 2 cores
-- with the suites beside it: a renewal can be late by hundreds of ms).
local VALGRIND = LUA:find("valgrind", 1, true) ~= nil
local SANITIZED = (os.getenv("LD_PRELOAD") or ""):find("libasan", 1, true) ~= nil
local TIME_SCALE = math.max(VALGRIND and 4 or SANITIZED and 2 or 1,
    tonumber(os.getenv("REDLOCK_TIME_SCALE") or "") or 1)
function _M.ms(n)
    return math.floor(TIME_SCALE * n)
end

--- How many draws a statistical test makes (tokens that never repeat):
-- n, or n / 50 under make test-valgrind, whose subject is memory (a full
-- collection every few instructions makes a large table's draws take
-- minutes there); every other suite draws n.
function _M.draws(n)
    if GC_STRESS then return math.floor(n / 50) end
    return n
end

-- Servers and redis-cli never run under a sanitizer runtime preloaded for
-- the Lua processes (make test-sanitize).
local NO_PRELOAD = "env -u LD_PRELOAD "
local BUILD = os.getenv("REDLOCK_BUILD") or "build"

local function sh(cmd)
    local ok = os.execute(cmd)
    return ok == true or ok == 0
end

local function read_cmd(cmd)
    local p = assert(io.popen(cmd))
    local out = p:read("*a")
    p:close()
    return out
end
_M.read_cmd = read_cmd

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
_M.quote = quote

local function urandom_int(n)
    local f = assert(io.open("/dev/urandom", "rb"))
    local b = f:read(4)
    f:close()
    local v = 0
    for i = 1, 4 do v = v * 256 + b:byte(i) end
    return v % n
end

local tmp_root = os.getenv("REDLOCK_TEST_TMP")
local function root()
    if not tmp_root then
        tmp_root = read_cmd("mktemp -d /tmp/redlock-spec.XXXXXX"):gsub("%s+$", "")
    end
    return tmp_root
end
_M.root = root

-- Ports for servers and nginx: below the kernel's ephemeral range
-- (ip_local_port_range, from 32768 by default), so that no connect on the
-- machine takes a stopped server's port as its own before the server
-- restarts there (a client retrying a dead local port even connects to
-- itself now and then: spec/70); and reserved machine-wide for as long as
-- this suite's temporary directory lives, by a link PORTS/PORT to it, so
-- that no spec running beside this one, in this run or another, starts a
-- server there meanwhile (a link whose directory is gone is free again).
local PORTS, PORT_LO = "/tmp/redlock-ports", 10000
local port_hi
local function ephemeral_floor()
    local f = io.open("/proc/sys/net/ipv4/ip_local_port_range")
    local lo = f and tonumber((f:read("*l") or ""):match("^%s*(%d+)"))
    if f then f:close() end
    return lo
end

--- A free port for a server (see PORTS above), reserved for this suite.
function _M.free_port()
    if not port_hi then
        local floor = ephemeral_floor()
        port_hi = (floor and floor > PORT_LO + 1000) and floor - 1 or 32767
        sh("mkdir -p -m 1777 " .. quote(PORTS))
    end
    for _ = 1, 100 do
        local port = PORT_LO + urandom_int(port_hi - PORT_LO + 1)
        local link = quote(PORTS .. "/" .. port)
        if sh(string.format('t=$(readlink %s) && [ ! -d "$t" ] && rm -f %s; ln -s %s %s 2>/dev/null', link, link,
            quote(root()), link)) then
            return port
        end
    end
    error("no free port: 100 picks in " .. PORT_LO .. "-" .. port_hi .. " were reserved (" .. PORTS .. ")")
end

local seq = 0
local function fresh_dir(prefix)
    seq = seq + 1
    local dir = string.format("%s/%s-%d-%d", root(), prefix, seq, urandom_int(1e9))
    assert(sh("mkdir -p " .. quote(dir)))
    return dir
end
_M.fresh_dir = fresh_dir

--- A key no other test uses.
function _M.key(prefix)
    seq = seq + 1
    return string.format("%s:%d:%d", prefix or "test", seq, urandom_int(1e9))
end

function _M.sleep(ms) sh("sleep " .. string.format("%.3f", ms / 1000)) end

-- A zombie is dead: where PID 1 reaps no orphans (as in some containers),
-- a stopped server stays one, and `kill -0` alone would wait for it. But
-- only once all its threads are gone: a thread group's leader turns zombie
-- first, and the sockets close with the last thread.
local function alive(pid)
    if not pid then return false end
    local f = io.open("/proc/" .. pid .. "/status")
    if f then
        local status = f:read("*a") or ""
        f:close()
        return not (status:match("\nState:%s*Z") and status:match("\nThreads:%s*1\n"))
    end
    return sh("kill -0 " .. pid .. " 2>/dev/null")
end
_M.alive = alive

-- The server binaries: $REDLOCK_SERVER_DIR's, else PATH's.
local SERVER_DIR = os.getenv("REDLOCK_SERVER_DIR")
if SERVER_DIR == "" then SERVER_DIR = nil end

local function file_exists(path)
    local f = io.open(path)
    if f then f:close() end
    return f ~= nil
end

-- The redis-server and redis-cli commands for a folder (nil: the default).
-- A folder without redis-cli (the stripped Redis builds) uses PATH's: the
-- protocol the helper speaks with it is the same from 2.4 on.
local function binaries(dir)
    dir = dir or SERVER_DIR
    if not dir then return "redis-server", "redis-cli" end
    local server = dir .. "/redis-server"
    if not file_exists(server) then error("no redis-server in " .. dir) end
    local cli = dir .. "/redis-cli"
    return server, file_exists(cli) and cli or "redis-cli"
end

--- What `redis-server --version` says, as x*10000 + y*100 + z
-- (2.6.12 -> 20612), with the product: { number =, text = "7.0.15",
-- product = "Redis" or "Valkey", name = "Redis 7.0.15", tls = bool }, for
-- the server of folder dir (default: the one the helper starts). Asked
-- once per binary.
local versions = {}
function _M.server_version(dir)
    local bin = binaries(dir)
    local v = versions[bin]
    if v then return v end
    local out = read_cmd(NO_PRELOAD .. quote(bin) .. " --version 2>&1")
    local a, b, c = out:match("v=(%d+)%.(%d+)%.(%d+)")
    if not a then a, b, c = out:match("version (%d+)%.(%d+)%.(%d+)") end
    if not a then error("cannot tell the version of " .. bin .. ": " .. out) end
    -- Valkey 7.2 says "Server v=...", later ones "Valkey server v=..."
    local product = out:match("^Redis ") and "Redis" or "Valkey"
    -- a TLS build links OpenSSL (../shared/servers' builds have no TLS);
    -- a Valkey folder's redis-server is a script that runs valkey-server
    local path = read_cmd("command -v " .. quote(bin) .. " 2>/dev/null"):gsub("%s+$", "")
    local real = read_cmd("readlink -f " .. quote(path) .. " 2>/dev/null"):gsub("%s+$", "")
    local valkey = real:gsub("[^/]*$", "") .. "valkey-server"
    if product == "Valkey" and file_exists(valkey) then real = valkey end
    local tls = real ~= "" and read_cmd(NO_PRELOAD .. "ldd " .. quote(real) .. " 2>/dev/null"):find("libssl", 1, true)
        ~= nil
    v = { number = tonumber(a) * 10000 + tonumber(b) * 100 + tonumber(c), text = a .. "." .. b .. "." .. c,
        product = product, tls = tls, dir = dir }
    v.name = product .. " " .. v.text
    versions[bin] = v
    return v
end

--- What specs may need that some server versions lack: the first version
-- that has it (as server_version's number; Valkey counts as the Redis it
-- forked, 7.2.4) and what it is, for the skip message.
local FEATURES = {
    scripting = { 20600, "scripting (EVAL)" },
    set_px = { 20612, "SET NX PX (script mode)" },
    scan = { 20800, "SCAN" },
    wrongtype = { 20800, "WRONGTYPE errors" },
    -- (2.8.24 tested; 2.6.17 leaves the client blocked)
    unblock_on_demote = { 20800, "UNBLOCKED for the blocked clients of a master turned replica" },
    client_kill_type = { 20812, "CLIENT KILL TYPE" },
    evalsha_stats = { 30000, "EVALSHA counted apart from EVAL in INFO commandstats" },
    cluster = { 30000, "Redis Cluster" },
    wait = { 30000, "WAIT" },
    script_time = { 30200, "TIME in scripts (effects replication): clock-seeded fences, the direct hand-off" },
    sentinel_auth = { 50001, "a password on the sentinels (requirepass in sentinel mode)" },
    script_effects = { 50000, "scripts replicated by their effects (a replica runs no EVALSHA)" },
    streams = { 50000, "streams (XADD): the fence counter a stream, the acquire without a script" },
    blpop_ms = { 60000, "BLPOP with a fractional timeout" },
    acl = { 60000, "ACL users" },
    acl_channels = { 60200, "ACL channel rules (&pattern)" },
    -- (its postponed clients run in the order they came, when it ends)
    pause_write = { 60200, "CLIENT PAUSE WRITE" },
    functions = { 70000, "FUNCTION/FCALL" },
    waitaof = { 70200, "WAITAOF" },
}
_M.FEATURES = FEATURES

--- Why the server (of folder dir, default the one the helper starts) cannot
-- serve `feature` (a FEATURES name, or "tls"): "Redis 2.8.24 lacks SCAN
-- (2.8.0+)"; nil when it can.
function _M.lacks(feature, dir)
    local v = _M.server_version(dir)
    if feature == "tls" then
        if v.tls then return nil end
        return v.name .. " lacks TLS (this build has none)"
    end
    local f = FEATURES[feature]
    if not f then error("helper.lacks: unknown feature " .. tostring(feature)) end
    if v.number >= f[1] then return nil end
    local since = f[1]
    return string.format("%s lacks %s (%d.%d.%d+)", v.name, f[2], math.floor(since / 10000),
        math.floor(since / 100) % 100, since % 100)
end

-- Ends the running test as skipped: busted's pending() as a test calls
-- it, with the test's name. (The spec's global of that name is not the
-- helper's: it is found on busted's module, whose API lookup holds the
-- busted object.)
local function skip(why)
    local m = package.loaded.busted
    local index = m and (getmetatable(m) or {}).__index
    if type(index) == "function" then
        for i = 1, 20 do
            local name, b = debug.getupvalue(index, i)
            if not name then break end
            if name == "busted" and type(b) == "table" and b.pending then
                local ok, test = pcall(function() return b.context.get().name end)
                b.pending("skipped: " .. (ok and test and ("'" .. test .. "': ") or "") .. why)
            end
        end
    end
    error("cannot skip (busted's pending not found): " .. why, 0)
end

--- Inside a test: ends it as skipped (busted's pending, which says why)
-- when the server lacks any of the features named.
function _M.needs(...)
    for i = 1, select("#", ...) do
        local why = _M.lacks((select(i, ...)))
        if why then skip(why) end
    end
end

--- For a whole describe block of tests that need features: an `it` that
-- skips each of its tests, by name, on a server lacking any of them.
--     local it = helper.needing(it, "set_px")
function _M.needing(it, ...)
    local features = { ... }
    return function(name, fn)
        return it(name, function(...)
            for _, feature in ipairs(features) do
                local why = _M.lacks(feature)
                if why then skip(why) end
            end
            return fn(...)
        end)
    end
end

-- Commands that a config line may rename away, by the version that brought
-- them: before it, the command does not exist, and renaming it away is
-- the same as leaving the line out.
local COMMAND_SINCE = {
    WATCH = 20200, EVAL = 20600, EVALSHA = 20600, SCRIPT = 20600, PEXPIRE = 20600,
    PTTL = 20600, PSETEX = 20600, TIME = 20600, SCAN = 20800, WAIT = 30000, ACL = 60000,
    FUNCTION = 70000, FCALL = 70000, FCALL_RO = 70000, EVAL_RO = 70000, EVALSHA_RO = 70000,
    WAITAOF = 70200,
}

-- A config line as the version v (server_version's) takes it: the line, a
-- replacement, or false (leave it out: the version behaves so without
-- it). Raises for a line the version cannot honour, which a spec needs.
local function config_line(line, v)
    local n = v.number
    local word = line:match("^%s*(%S+)") or ""
    word = word:lower()
    if word == "save" and n < 20600 then return false end -- 2.4 refuses `save ""`
    if word == "rename-command" then
        local cmd = line:match("^%s*%S+%s+(%S+)")
        local since = cmd and COMMAND_SINCE[cmd:upper()]
        if since and n < since then return false end
        return line
    end
    -- before 3.2 every server is open to all (bound to 127.0.0.1 here)
    if word == "protected-mode" and n < 30200 then return false end
    -- before 7.0, DEBUG, MODULE and the protected configs are always allowed
    if (word == "enable-debug-command" or word == "enable-module-command"
        or word == "enable-protected-configs") and n < 70000 then return false end
    if word == "latency-tracking" and n < 70000 then return false end
    if n < 50000 then
        -- the replica words came in 5.0; before, the same options say slave
        local rest = line:match("^%s*replicaof%s+(.*)$")
        if rest then return "slaveof " .. rest end
        local opt, args = line:match("^%s*replica%-(%S+)%s*(.*)$")
        if opt then return "slave-" .. opt .. " " .. args end
        local min = line:match("^%s*min%-replicas%-(.*)$")
        if min then return "min-slaves-" .. min end
    end
    local needs
    if word == "user" or word == "aclfile" then
        needs = "acl"
    elseif word:match("^tls%-") then
        needs = "tls"
    elseif word:match("^cluster%-") then
        needs = "cluster"
    end
    local why = needs and _M.lacks(needs, v.dir)
    if why then
        error(string.format("config line %q: %s (the spec should call helper.needs(%q))", line, why, needs), 0)
    end
    return line
end

local Server = {}
Server.__index = Server
local running = {}

--- redis-cli against this server; returns its output, trailing space cut.
function Server:cli(...)
    local _, cli = binaries(self.server_dir)
    local args = { NO_PRELOAD .. (self.exec or "") .. quote(cli), "-h", self.host or "127.0.0.1", "-p", self.port }
    if self.tls_cli then
        -- a TLS handshake with a plaintext server on that port (ours did not
        -- bind: another took the port) would wait forever
        args[1] = NO_PRELOAD .. "timeout 10 " .. quote(cli)
        args[#args + 1] = self.tls_cli
    end
    if self.password then
        if self.username_cli then
            args[#args + 1] = "--user " .. quote(self.username_cli)
        end
        args[#args + 1] = "-a " .. quote(self.password) .. " --no-auth-warning"
    end
    for _, a in ipairs({ ... }) do args[#args + 1] = quote(a) end
    return (read_cmd(table.concat(args, " ") .. " 2>&1"):gsub("%s+$", ""))
end

function Server:url(db)
    return string.format("redis://%s:%d%s", self.host or "127.0.0.1", self.port, db and ("/" .. db) or "")
end

function Server:spec(extra)
    local t = { host = self.host or "127.0.0.1", port = self.port, tls = self.tls }
    for k, v in pairs(extra or {}) do t[k] = v end
    return t
end

local function write_conf(self)
    local v = _M.server_version(self.server_dir)
    if self.sentinel_lines then
        -- a sentinel: its own few lines (it rewrites the file as it learns)
        local lines = { "port " .. self.port, "bind " .. (self.host or "127.0.0.1"), "daemonize no",
            "dir " .. self.dir, "logfile " .. self.dir .. "/redis.log" }
        for _, l in ipairs(self.sentinel_lines) do
            local line = config_line(l, v)
            if line then lines[#lines + 1] = line end
        end
        local f = assert(io.open(self.dir .. "/redis.conf", "w"))
        f:write(table.concat(lines, "\n"), "\n")
        f:close()
        return
    end
    local lines = {
        "port " .. self.port,
        "bind " .. (self.host or "127.0.0.1"),
        "save \"\"",
        "daemonize no",
        "dir " .. self.dir,
        "logfile " .. self.dir .. "/redis.log",
    }
    if self.tls then
        -- TLS only: no plaintext port, no unix socket
        lines[1] = "port 0"
        lines[#lines + 1] = "tls-port " .. self.port
    else
        lines[#lines + 1] = "unixsocket " .. self.socket
        lines[#lines + 1] = "unixsocketperm 700"
    end
    if self.password then lines[#lines + 1] = "requirepass " .. self.password end
    local persistent = false
    for _, l in ipairs(self.config or {}) do
        if l == "appendonly yes" then persistent = true end
    end
    if not persistent then lines[#lines + 1] = "appendonly no" end
    for _, l in ipairs(self.config or {}) do lines[#lines + 1] = l end
    -- what this server's version takes (see config_line)
    local kept = {}
    for _, l in ipairs(lines) do
        local line = config_line(l, v)
        if line then kept[#kept + 1] = line end
    end
    lines = kept
    local f = assert(io.open(self.dir .. "/redis.conf", "w"))
    f:write(table.concat(lines, "\n"), "\n")
    f:close()
end

local function ready(self)
    for _ = 1, 250 do
        if not alive(self.pid) then return false end
        local out = self:cli("PING")
        -- (and ours: a server that could not bind its port exits, and
        -- another one may answer there, another test run's say)
        if out == "PONG" then
            return alive(self.pid) and self:cli("INFO"):find("process_id:" .. self.pid .. "\r?\n") ~= nil
        end
        _M.sleep(20)
    end
    return false
end

function Server:start()
    for _ = 1, 20 do
        if not self.fixed_port then self.port = _M.free_port() end
        write_conf(self)
        -- (self.exec: a prefix that must exec redis-server in place, so
        -- that $! is the server: `ip netns exec NS`, `env FAKETIME=...`)
        local cmd = string.format("%s%s%s %s%s >>%s 2>&1 & echo $!", NO_PRELOAD, self.exec or "",
            quote((binaries(self.server_dir))), quote(self.dir .. "/redis.conf"),
            self.sentinel_lines and " --sentinel" or "", quote(self.dir .. "/stdout.log"))
        self.pid = read_cmd("sh -c " .. quote(cmd)):match("%d+")
        local f = assert(io.open(self.dir .. "/pid", "w"))
        f:write(self.pid, "\n")
        f:close()
        if ready(self) then
            running[self] = true
            return self
        end
        self:stop()
        -- a config line this server refuses: no other port will do
        local log = read_cmd("cat " .. quote(self.dir .. "/stdout.log") .. " " .. quote(self.dir .. "/redis.log")
            .. " 2>/dev/null")
        if log:find("FATAL CONFIG FILE ERROR", 1, true) then
            error(string.format("%s refuses its config in %s:\n%s", _M.server_version(self.server_dir).name,
                self.dir, log:match("FATAL CONFIG FILE ERROR.*$")), 0)
        end
        if self.fixed_port then break end
    end
    error("could not start redis-server (" .. _M.server_version(self.server_dir).name .. ") in " .. self.dir)
end

--- Test certificates made by `openssl` in a fresh directory (once per
-- spec file: call it once and share the result). Returns a table of paths:
-- ca (the CA's certificate), server_crt/server_key (for 127.0.0.1 and
-- localhost), client_crt/client_key, expired_crt (the server's key, expired
-- yesterday), other_ca (a CA that signed nothing here), dir.
function _M.tls_certs()
    local dir = fresh_dir("tls")
    local script = [[
set -e
cd "$1"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
key ca.key; key other-ca.key; key server.key; key client.key
openssl req -x509 -new -key ca.key -out ca.crt -days 2 -subj /CN=redlock-test-ca 2>/dev/null
openssl req -x509 -new -key other-ca.key -out other-ca.crt -days 2 -subj /CN=redlock-other-ca 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > san.ext
openssl req -new -key server.key -out server.csr -subj /CN=localhost 2>/dev/null
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile san.ext -out server.crt 2>/dev/null
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days -1 -extfile san.ext -out expired.crt 2>/dev/null
openssl req -new -key client.key -out client.csr -subj /CN=redlock-client 2>/dev/null
openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -out client.crt 2>/dev/null
]]
    assert(sh("sh -c " .. quote(script) .. " sh " .. quote(dir)), "openssl could not make the test certificates")
    return {
        dir = dir, ca = dir .. "/ca.crt", other_ca = dir .. "/other-ca.crt",
        server_crt = dir .. "/server.crt", server_key = dir .. "/server.key",
        client_crt = dir .. "/client.crt", client_key = dir .. "/client.key",
        expired_crt = dir .. "/expired.crt",
    }
end

--- A port for a server's second listener (tls-port): free_port's; the
-- caller starts again with another when it is taken.
local pick_port = _M.free_port
_M.pick_port = pick_port

--- Starts a redis-server that also listens with TLS on server.tls_port
-- (the plain port stays, for redis-cli and for looking at keys). certs:
-- from tls_certs(); opts: auth_clients ("no" by default, or "yes"),
-- cert (the server's certificate file: certs.server_crt by default),
-- tls_only = true: no plaintext port and no unix socket at all (`port 0`);
-- then server.port is the TLS port too, server:cli() and server:spec()
-- speak TLS with the test CA and the client certificate, and server:url()
-- is a plaintext URL on the TLS port.
function _M.start_tls_server(certs, opts)
    opts = opts or {}
    local function config(port)
        local t = {
            "tls-cert-file " .. (opts.cert or certs.server_crt),
            "tls-key-file " .. certs.server_key,
            "tls-ca-cert-file " .. certs.ca,
            "tls-auth-clients " .. (opts.auth_clients or "no"),
        }
        if port then t[#t + 1] = "tls-port " .. port end
        return t
    end
    if opts.tls_only then
        local server = _M.start_server { config = config(nil), tls = {
            ca_file = certs.ca, cert_file = certs.client_crt, key_file = certs.client_key } }
        server.tls_port = server.port
        return server
    end
    for _ = 1, 5 do
        local port = pick_port()
        local ok, server = pcall(_M.start_server, { config = config(port) })
        if ok then
            server.tls_port = port
            return server
        end
    end
    error("could not start a TLS redis-server")
end

--- "rediss://127.0.0.1:<tls port>"
function Server:tls_url() return string.format("rediss://127.0.0.1:%d", self.tls_port) end

--- Starts a redis-server. opts: password, config = { extra conf lines }
-- (see config_line: those the server's version lacks may be left out),
-- server_dir (the folder whose redis-server to start; default
-- $REDLOCK_SERVER_DIR's, else PATH's),
-- persistent = true (AOF with fsync always, so a restart keeps the data),
-- host (the address to bind, 127.0.0.1 by default: spec/netns.lua's
-- private addresses inside a network namespace), exec (a prefix for the
-- redis-server and redis-cli commands that execs them in place, e.g.
-- "ip netns exec NS "; it may carry quotes, never a single quote),
-- tls = { ca_file =, cert_file =, key_file = } (start_tls_server's
-- tls_only: TLS on the one port, whose certificates config names).
function _M.start_server(opts)
    opts = opts or {}
    local dir = fresh_dir("redis")
    local self = setmetatable({
        dir = dir,
        socket = (not opts.tls) and dir .. "/redis.sock" or nil,
        password = opts.password,
        username_cli = opts.username_cli,
        config = opts.config,
        server_dir = opts.server_dir,
        host = opts.host,
        exec = opts.exec,
        tls = opts.tls,
        tls_cli = opts.tls and string.format("--tls --cacert %s --cert %s --key %s",
            quote(opts.tls.ca_file), quote(opts.tls.cert_file), quote(opts.tls.key_file)),
    }, Server)
    if opts.persistent then
        self.config = self.config or {}
        table.insert(self.config, "appendonly yes")
        table.insert(self.config, "appendfsync always")
    end
    return self:start()
end

--- Why a spec that does not depend on the interpreter does not run in
-- this suite, or nil: a slow topology spec (Sentinel failover, replicas),
-- say, runs under Lua 5.4 only (the ASan build in `make test`, for the C
-- it reaches), not again under every interpreter. what: "topology specs"
-- by default.
function _M.lua54_only(what)
    if (os.getenv("REDLOCK_LUA") or "lua5.4") ~= "lua5.4" then
        return (what or "topology specs") .. " run in the Lua 5.4 suite"
    end
    return nil
end

--- Starts a replica of master (replicaof, its own port) and waits until its
-- link to the master is up. opts: as start_server's.
function _M.start_replica(master, opts)
    opts = opts or {}
    local config = { "replicaof " .. (master.host or "127.0.0.1") .. " " .. master.port }
    if master.password then config[#config + 1] = "masterauth " .. master.password end
    for _, l in ipairs(opts.config or {}) do config[#config + 1] = l end
    local replica = _M.start_server({ password = opts.password, config = config, host = opts.host,
        exec = opts.exec, server_dir = opts.server_dir or master.server_dir })
    replica.master = master
    -- (30 s: a full sync forks the master and writes its RDB, each slow on a
    -- busy machine; seen over 10 s once)
    if not _M.eventually(30000, function()
        return replica:cli("INFO", "replication"):find("master_link_status:up", 1, true) ~= nil
    end) then
        error("the replica on port " .. replica.port .. " did not connect to its master; its log ends:\n"
            .. read_cmd("tail -n 8 " .. quote(replica.dir .. "/redis.log")))
    end
    -- and until a write reaches it, as WAIT counts it (Redis 3.0+): its side
    -- of the link comes up first, and a WAIT soon after once waited past
    -- 600 ms for the acknowledgement of the first write (the probe key
    -- goes at once)
    local probe = "redlock-test:replica-probe"
    if not _M.eventually(30000, function()
        local replicas = master:cli("INFO", "replication"):match("connected_slaves:(%d+)") or "1"
        master:cli("SET", probe, "1")
        master:cli("DEL", probe)
        local n = master:cli("WAIT", replicas, "100")
        return (tonumber(n) or 0) >= tonumber(replicas) or n:find("unknown command", 1, true) ~= nil
    end) then
        error("the master on port " .. master.port .. " does not count its replica on port " .. replica.port
            .. " in WAIT:\n" .. master:cli("INFO", "replication"))
    end
    return replica
end

--- Starts a redis-sentinel (redis-server --sentinel) that monitors each
-- master of masters ({name = server}), with quorum 2 and short timeouts
-- (down after 1 s), so that a failover takes a few seconds. A master is a
-- server, or any table with the port to watch it on. opts: quorum,
-- password, config = { extra lines }.
function _M.start_sentinel(masters, opts)
    opts = opts or {}
    local lines = {}
    for name, master in pairs(masters) do
        lines[#lines + 1] = string.format("sentinel monitor %s %s %d %d", name, master.host or "127.0.0.1", master.port,
            opts.quorum or 2)
        lines[#lines + 1] = "sentinel down-after-milliseconds " .. name .. " 1000"
        lines[#lines + 1] = "sentinel failover-timeout " .. name .. " 5000"
        if master.password then lines[#lines + 1] = "sentinel auth-pass " .. name .. " " .. master.password end
    end
    if opts.password then lines[#lines + 1] = "requirepass " .. opts.password end
    for _, l in ipairs(opts.config or {}) do lines[#lines + 1] = l end
    local dir = fresh_dir("sentinel")
    local self = setmetatable({ dir = dir, socket = dir .. "/none.sock", sentinel_lines = lines,
        password = opts.password, host = opts.host, exec = opts.exec, server_dir = opts.server_dir }, Server)
    return self:start()
end

--- Starts a Redis Cluster of `masters` masters with `replicas` replicas
-- each (redis-cli --cluster create) on free ports, and waits until every
-- node says cluster_state:ok. Returns { nodes = {server, ...}, url =
-- "redis+cluster://...", seeds = {"127.0.0.1:port", ...} }. opts.tls =
-- certs (from tls_certs()): every node TLS only, as start_tls_server's
-- tls_only (its one port speaks TLS, the cluster bus and replication too:
-- tls-cluster, tls-replication), and url is "rediss+cluster://...".
function _M.start_cluster(masters, replicas, opts)
    opts = opts or {}
    local certs = opts.tls
    local tls = certs and { ca_file = certs.ca, cert_file = certs.client_crt, key_file = certs.client_key }
    local nodes, addrs = {}, {}
    for i = 1, masters * (1 + replicas) do
        local config = { "cluster-enabled yes", "cluster-config-file nodes.conf",
            "cluster-node-timeout " .. (opts.node_timeout or 2000), "cluster-require-full-coverage no" }
        if certs then
            for _, l in ipairs({ "tls-cert-file " .. certs.server_crt, "tls-key-file " .. certs.server_key,
                "tls-ca-cert-file " .. certs.ca, "tls-auth-clients no", "tls-cluster yes",
                "tls-replication yes" }) do
                config[#config + 1] = l
            end
        end
        for _, l in ipairs(opts.config or {}) do config[#config + 1] = l end
        nodes[i] = _M.start_server({ config = config, server_dir = opts.server_dir, tls = tls })
        if certs then nodes[i].tls_port = nodes[i].port end
        addrs[i] = "127.0.0.1:" .. nodes[i].port
    end
    local _, cli = binaries(opts.server_dir)
    local out = read_cmd(NO_PRELOAD .. (tls and "timeout 60 " or "") .. quote(cli) .. " "
        .. (nodes[1].tls_cli or "") .. " --cluster create " .. table.concat(addrs, " ")
        .. " --cluster-replicas " .. replicas .. " --cluster-yes 2>&1")
    assert(out:find("All 16384 slots covered", 1, true), "redis-cli --cluster create failed:\n" .. out)
    assert(_M.eventually(20000, function()
        for _, node in ipairs(nodes) do
            if not node:cli("CLUSTER", "INFO"):find("cluster_state:ok", 1, true) then return false end
        end
        return true
    end), "the cluster did not reach cluster_state:ok")
    return { nodes = nodes, seeds = addrs,
        url = (certs and "rediss" or "redis") .. "+cluster://" .. table.concat(addrs, ",", 1, 2) }
end

--- Moves `slot` of a cluster (from start_cluster) from master src to
-- master dst as `redis-cli --cluster reshard` does: IMPORTING and
-- MIGRATING, the slot's keys MIGRATEd ten at a time until none is left
-- (twice, pause_ms apart, when pause_ms is given: clients going on between
-- create keys on dst through ASK), then the slot given to dst on every
-- master.
function _M.move_slot(cluster, slot, src, dst, pause_ms)
    local src_id, dst_id = src:cli("CLUSTER", "MYID"), dst:cli("CLUSTER", "MYID")
    local said = dst:cli("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    assert(said == "OK", "SETSLOT IMPORTING failed on " .. dst.port .. ": " .. said)
    said = src:cli("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    assert(said == "OK", "SETSLOT MIGRATING failed on " .. src.port .. ": " .. said)
    local function migrate_all()
        repeat
            local keys = {}
            for k in src:cli("CLUSTER", "GETKEYSINSLOT", slot, "10"):gmatch("[^\n]+") do keys[#keys + 1] = k end
            if #keys > 0 then
                src:cli("MIGRATE", dst.host or "127.0.0.1", dst.port, "", "0", "5000", "KEYS", (table.unpack or unpack)(keys))
            end
        until #keys == 0
    end
    migrate_all()
    if pause_ms then
        _M.sleep(pause_ms)
        migrate_all()
    end
    for _, node in ipairs(cluster.nodes) do
        if node:cli("ROLE"):match("^master") then node:cli("CLUSTER", "SETSLOT", slot, "NODE", dst_id) end
    end
end

--- A server's clock (TIME, over conn), in microseconds.
function _M.server_us(conn)
    local t = conn:command("TIME")
    return tonumber(t[1]) * 1e6 + tonumber(t[2])
end

--- Whether conn's server clock gets more than us microseconds past since
-- (microseconds on that clock; default: its now) within 5 s.
function _M.server_clock_past(conn, us, since)
    since = since or _M.server_us(conn)
    return _M.eventually(5000, function() return _M.server_us(conn) - since > us end)
end

--- The node of a cluster (from start_cluster) that serves key now.
function _M.cluster_owner(cluster, key)
    local slot = tonumber(cluster.nodes[1]:cli("CLUSTER", "KEYSLOT", key))
    for _, node in ipairs(cluster.nodes) do
        local mine = false
        for line in node:cli("CLUSTER", "NODES"):gmatch("[^\n]+") do
            if line:find("myself", 1, true) and line:find("master", 1, true) then
                -- fields 9 and on: "lo-hi" ranges, single slots, [migrations]
                local i = 0
                for field in line:gmatch("%S+") do
                    i = i + 1
                    local lo, hi = field:match("^(%d+)%-(%d+)$")
                    lo, hi = tonumber(lo or field:match("^(%d+)$")), tonumber(hi or field:match("^(%d+)$"))
                    if i >= 9 and lo and slot >= lo and slot <= hi then mine = true end
                end
            end
        end
        if mine then return node, slot end
    end
    return nil, slot
end

--- The address a sentinel gives for a master: "host:port" or nil.
function Server:master_addr(name)
    local out = self:cli("SENTINEL", "get-master-addr-by-name", name)
    local host, port = out:match("^(%S+)%s+(%d+)$")
    return host and (host .. ":" .. port) or nil
end

--- Waits (at most ms) until `replica` has everything this master has
-- written so far: its replication offset reaches the master's, read now.
-- (A WAIT from redis-cli would not do: it waits for that connection's own
-- writes, of which there are none.) Returns whether it did.
function Server:replicated_to(replica, ms)
    local function offset(server, field)
        return tonumber(server:cli("INFO", "replication"):match(field .. ":(%d+)")) or -1
    end
    local target = offset(self, "master_repl_offset")
    return _M.eventually(ms, function() return offset(replica, "slave_repl_offset") >= target end)
end

--- Whether self.pid is still this server: a pid is reused once its process
-- is gone (pid_max may be 32768), and a signal must not reach another
-- process that got it. (A process whose directory cannot be read is a
-- zombie leader still closing its sockets: alive's rule.)
function Server:running()
    if not alive(self.pid) then return false end
    local cwd = read_cmd("readlink /proc/" .. self.pid .. "/cwd 2>/dev/null"):gsub("%s+$", "")
    return cwd == "" or cwd == self.dir
end

function Server:signal(sig)
    if not self:running() then return false end
    return sh("kill -" .. sig .. " " .. self.pid .. " 2>/dev/null")
end
function Server:freeze() return self:signal("STOP") end
function Server:thaw() return self:signal("CONT") end

--- Stops the server (SIGCONT first, in case a spec froze it), waiting
-- until the process is gone.
function Server:stop(sig)
    if self.pid then
        self:signal("CONT")
        self:signal(sig or "TERM")
        for i = 1, 150 do
            if not self:running() then break end
            if i == 100 then self:signal("KILL") end
            _M.sleep(20)
        end
    end
    running[self] = nil
end

function Server:kill() return self:stop("KILL") end

--- Runs a shell command in the background after `ms` milliseconds (to hit
-- a server while this process is blocked in a call).
function _M.later(ms, cmd)
    sh(string.format("(sleep %.3f; %s) >/dev/null 2>&1 &", ms / 1000, cmd))
end

--- Sends `lines` (commands, one a line: a MULTI block, say) to this server
-- through redis-cli after `ms` ms, from the background.
function Server:cli_later(ms, lines)
    local _, cli = binaries(self.server_dir)
    _M.later(ms, string.format("printf %%s %s | %s%s -h %s -p %d", quote(lines), NO_PRELOAD, quote(cli),
        self.host or "127.0.0.1", self.port))
end

--- Sends `sig` to the server after `ms` ms, from the background.
function Server:signal_later(ms, sig) _M.later(ms, "kill -" .. sig .. " " .. self.pid) end

--- Starts the server again on the same port: its data gone, unless it was
-- started with persistent = true.
function Server:restart()
    self:stop()
    self.fixed_port = true
    return self:start()
end

function _M.stop_all()
    for s in pairs(running) do s:stop() end
end

--- The median of a list of numbers (the lower middle one for an even
-- count), for the benchmarks; the list is left as it was.
function _M.median(t)
    local s = {}
    for i, v in ipairs(t) do s[i] = v end
    table.sort(s)
    return s[math.floor((#s + 1) / 2)]
end

--- The last fence a server's counter gave (what `redlock status` shows),
-- as a string of digits: the stream's last ID as a fence (Redis 5.0+), or
-- a string counter's value; "0" when there is none. data: a conn.
function _M.last_fence(data, counter)
    counter = counter or "redlock:fences"
    local kind = data:command("TYPE", counter)
    if kind == "string" then return data:command("GET", counter) end
    if kind ~= "stream" then return "0" end
    local info = data:command("XINFO", "STREAM", counter)
    for i = 1, #info - 1, 2 do
        if info[i] == "last-generated-id" then
            local ms, n = info[i + 1]:match("^(%d+)%-(%d+)$")
            return string.format("%.0f", (tonumber(ms) - 1767225600000) * 100 + math.min(tonumber(n), 99))
        end
    end
end

--- Sets a server's fence counter so that its next fence is fence + 1 (a
-- stream whose last ID is that fence's; on a server without streams, a
-- string counter). data: a conn.
function _M.set_fence(data, fence, counter)
    counter = counter or "redlock:fences"
    data:command("DEL", counter)
    local n = fence % 100
    local r = data:command("XADD", counter, "MAXLEN", "0",
        string.format("%.0f-%d", (fence - n) / 100 + 1767225600000, n), "f", "1")
    if r == nil then data:command("SET", counter, string.format("%.0f", fence)) end
end

--- The ms a key has left on a redis.core conn: PTTL, or before Redis 2.6
-- (no PTTL) TTL's seconds x 1000; -2 gone, -1 no expiry (as PTTL, also
-- on 2.4, whose TTL says -1 for both: then EXISTS tells).
function _M.pttl(conn, key)
    if _M.server_version().number >= 20600 then return conn:command("PTTL", key) end
    local t = conn:command("TTL", key)
    if t == -1 and conn:command("EXISTS", key) == 0 then return -2 end
    if t < 0 then return t end
    return t * 1000
end

--- The last line of a tool's output file matching pattern (its capture),
-- waited for up to 5 s; raises if it does not come.
local function await_line(file, pattern)
    local found
    assert(_M.eventually(5000, function()
        local f = io.open(file)
        if not f then return false end
        for l in f:lines() do found = l:match(pattern) or found end
        f:close()
        return found ~= nil
    end), "no line " .. pattern .. " in " .. file)
    return found
end

--- A proxy in front of `server` that can hold back what clients send
-- (build/tests/hold_proxy, spec/c/hold_proxy.c): p:url() to reach the
-- server through it; p:hold() keeps, from now on, what clients send on the
-- connections open now and on the next `new` ones; p:release() forwards
-- it, a connection at a time in the order they came, each after the
-- server answered the one before, and returns once that is done (how
-- many connections); p:cut() closes each connection open now after the
-- first line of the server's next bytes (the first reply of a write that
-- has two); p:stop(). Stopped at the end of the suite.
function _M.start_hold_proxy(server, new)
    local dir = fresh_dir("proxy")
    local out = dir .. "/out"
    local pid = read_cmd(string.format("%s/tests/hold_proxy 300 %d %d > %s 2>&1 & echo $!",
        BUILD:gsub("/redlock$", ""), server.port, new, out)):match("%d+")
    local f = assert(io.open(dir .. "/pid", "w"))
    f:write(pid, "\n")
    f:close()
    local port = await_line(out, "^port (%d+)$")
    local p, holds, releases, cuts = { pid = pid }, 0, 0, 0
    -- (each signal is waited for: the next line of that kind in the output)
    local function count(pattern)
        local n, f2 = 0, io.open(out)
        for l in f2:lines() do if l:match(pattern) then n = n + 1 end end
        f2:close()
        return n
    end
    function p.url() return "redis://127.0.0.1:" .. port end
    function p.hold()
        holds = holds + 1
        sh("kill -USR1 " .. pid)
        assert(_M.eventually(5000, function() return count("^holding$") >= holds end), "the proxy did not hold")
    end
    function p.release()
        releases = releases + 1
        sh("kill -USR2 " .. pid)
        assert(_M.eventually(10000, function() return count("^released %d+$") >= releases end),
            "the proxy did not release")
        return tonumber(await_line(out, "^released (%d+)$"))
    end
    function p.cut()
        cuts = cuts + 1
        sh("kill -HUP " .. pid)
        assert(_M.eventually(5000, function() return count("^cutting$") >= cuts end), "the proxy did not cut")
    end
    function p.stop() sh("kill " .. pid .. " 2>/dev/null") end
    return p
end

--- Brings back every server of the list that a test killed or froze, and
-- makes data[i], a core.conn to servers[i], afresh.
function _M.heal(servers, data)
    local core = require "redlock.core" -- (the helper itself loads no module)
    for i, s in ipairs(servers) do
        s:thaw()
        if not s:running() then s:restart() end
        data[i]:close()
        data[i] = core.conn(s:spec())
    end
end

--- Whether cond() becomes true within ms (looked at every 20 ms, and once
-- more at the end).
function _M.eventually(ms, cond)
    local core = require "redlock.core" -- (the helper itself loads no module)
    local deadline = core.now() + ms
    repeat
        if cond() then return true end
        core.sleep(20)
    until core.now() > deadline
    return cond() and true or false
end

--- For the benchmarks: n uncontended acquire+release cycles of client on
-- key; the mean time of one, in us.
function _M.cycle_us(client, key, n)
    local core = require "redlock.core"
    local t0 = core.now()
    for _ = 1, n do
        local lock = assert(client:acquire(key))
        assert(lock:release())
    end
    return (core.now() - t0) * 1000 / n
end

--- A shell command that runs a Lua script under the interpreter of this
-- suite, with the module's paths and the core of build (default: the
-- suite's, $REDLOCK_BUILD).
function _M.lua_cmd_in(build, script, ...)
    local args = {}
    for i, a in ipairs({ ... }) do args[i] = quote(a) end
    return string.format("LUA_PATH=%s LUA_CPATH=%s %s %s %s",
        quote("lua/?.lua;lua/?/init.lua;spec/?.lua;;"), quote((build or BUILD) .. "/?.so;;"),
        LUA, quote(script), table.concat(args, " "))
end
function _M.lua_cmd(script, ...) return _M.lua_cmd_in(nil, script, ...) end

--- Starts a worker in the background; returns a handle whose wait() returns
-- its exit status and output.
function _M.spawn(script, ...) return _M.spawn_in("", script, ...) end

--- The same, its command behind a prefix that execs it ("ip netns exec NS ").
function _M.spawn_in(prefix, script, ...)
    local dir = fresh_dir("worker")
    local cmd = prefix .. _M.lua_cmd(script, ...)
    -- The background shell must not keep popen's pipe open, or reading the
    -- pid would wait for the worker to finish (and workers would run one
    -- after another).
    local pid = read_cmd(string.format("sh -c %s </dev/null >/dev/null 2>&1 & echo $!",
        quote(cmd .. " >" .. dir .. "/out 2>&1; echo $? >" .. dir .. "/status"))):match("%d+")
    local w = { pid = pid, dir = dir }
    function w.wait(_, limit_ms)
        local waited = 0
        while waited < (limit_ms or 60000) do
            local f = io.open(dir .. "/status")
            local status = f and f:read("*l")
            if f then f:close() end
            if status and status ~= "" then
                local o = io.open(dir .. "/out")
                local out = o:read("*a")
                o:close()
                return tonumber(status), out
            end
            _M.sleep(20)
            waited = waited + 20
        end
        return nil, "worker did not finish in time"
    end
    return w
end

--- The usual single-server set-up of a spec: a fresh redis-server, a
-- client on it (retry_delay 10 ms, retry_jitter 5 ms unless `opts` says
-- otherwise) and a plain connection for looking at keys.
function _M.single_server(opts)
    local server = _M.start_server()
    local client_opts = { servers = { server:url() }, retry_delay = 10, retry_jitter = 5 }
    for k, v in pairs(opts or {}) do client_opts[k] = v end
    return server, require("redlock").new(client_opts), require("redlock.core").conn(server:spec())
end

--- Closes what single_server made and stops every server.
function _M.close_all(client, data)
    client:close()
    data:close()
    _M.stop_all()
end

--- Makes a redlock module loaded fresh (so specs see the tree's code).
function _M.redlock() return require "redlock" end

--- For the benchmarks: why processes cannot be pinned to CPUs here (no
-- taskset, from util-linux; fewer than 2 CPUs), or nil.
function _M.pin_missing()
    if not sh("command -v taskset >/dev/null 2>&1") then return "no taskset (util-linux)" end
    local n = tonumber(read_cmd("nproc 2>/dev/null"):match("%d+"))
    if not n or n < 2 then return "fewer than 2 CPUs" end
    return nil
end

--- For the benchmarks: pins process pid (this process when nil), all its
-- threads, to cpu (a number, or a list as taskset takes it: "0-3"); what
-- it starts later inherits that. Returns whether taskset could.
function _M.pin(pid, cpu)
    if not pid then
        local f = assert(io.open("/proc/self/stat"))
        pid = f:read("*l"):match("^(%d+)")
        f:close()
    end
    return sh(string.format("taskset -a -pc %s %s >/dev/null 2>&1", cpu, pid))
end

return _M
