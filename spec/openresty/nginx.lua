--- Test driver: renders examples/openresty/nginx.conf into a directory of
-- its own, starts Debian's nginx with the Lua module on a free port, stops
-- it. spec/run.sh runs the directory's `stop` file if the suite dies first.
local helper = require "helper"

local _M = {}

local MODULE = "/usr/lib/nginx/modules/ngx_http_lua_module.so"
-- Nothing this driver runs (nginx, curl, ps: ps hangs with ASan loaded)
-- runs under the sanitizer runtimes that make test-sanitize preloads into
-- the Lua processes.
local NO_PRELOAD = "unset LD_PRELOAD; "

local function read_cmd(cmd) return helper.read_cmd(NO_PRELOAD .. cmd) end
_M.read_cmd = read_cmd

--- Why nginx with the Lua module cannot run here, or nil when it can.
-- nginx runs its own LuaJIT with build/jit's core whatever runs busted:
-- its specs run once, in the Lua 5.4 suite (the sanitizer's in `make
-- test`), not again under every interpreter.
function _M.missing()
    local other = helper.lua54_only("nginx's specs")
    if other then return other end
    if not read_cmd("command -v nginx"):find("nginx") then return "nginx is not installed" end
    local f = io.open(MODULE)
    if not f then return "libnginx-mod-http-lua is not installed" end
    f:close()
    if not read_cmd("command -v curl"):find("curl") then return "curl is not installed" end
end

local function read(path)
    local f = io.open(path)
    if not f then return nil end
    local s = f:read("*a")
    f:close()
    return s
end
_M.read = read

local function sh(cmd)
    local ok = os.execute(NO_PRELOAD .. cmd)
    return ok == true or ok == 0
end

local Nginx = {}
Nginx.__index = Nginx


-- Whether any process of the group is alive (zombies do not count: PID 1
-- here does not reap them).
local function group_alive(pgid)
    return sh(string.format("ps -e -o pgid=,stat= | awk '$1 == %d && $2 !~ /^Z/ { f = 1 } END { exit !f }'",
        pgid))
end

local function render(template, vars)
    local function fill(text)
        return (text:gsub("@(%u[%u_]*)@", function(name)
            local v = vars[name]
            if v == nil then return nil end
            return tostring(v)
        end))
    end
    -- A marker is a comment ("# @HTTP@", "-- @INIT@"): the whole comment
    -- becomes the text. Twice: the markers' text may hold @REPO@ too.
    local conf = template:gsub("# @(%u+)@", "@%1@"):gsub("%-%- @(%u+)@", "@%1@")
    conf = fill(fill(conf))
    if vars.LUA_PATH then
        conf = conf:gsub('lua_package_path "', 'lua_package_path "' .. fill(vars.LUA_PATH):gsub("%%", "%%%%"), 1)
    end
    return conf
end

-- The command line of docs/openresty.md: everything under the prefix self.dir.
local function nginx_cmd(self, extra)
    return string.format("nginx -p %s/ -c nginx.conf -e error.log %s", self.dir, extra)
end

-- Starts nginx on a free port: conf(port) gives the configuration's text.
-- Runs `nginx -t` first (its output in self.tested); then nginx as the
-- docs/openresty.md says, prefix and error log in a fresh directory. Then waits for
-- its /health, unless no_health (the master listens before it writes its
-- pid file: requests wait in the backlog for a worker).
local function start_conf(conf, no_health)
    local self = setmetatable({ dir = helper.fresh_dir("nginx") }, Nginx)
    for _ = 1, 10 do
        self.port = helper.free_port()
        -- a try that found its port taken leaves its complaint there
        os.remove(self.dir .. "/error.log")
        local f = assert(io.open(self.dir .. "/nginx.conf", "w"))
        f:write(conf(self.port))
        f:close()
        self.tested = read_cmd(nginx_cmd(self, "-t 2>&1; echo rc=$?"))
        if not self.tested:find("rc=0", 1, true) then error("nginx -t failed:\n" .. self.tested) end
        -- daemon: the master calls setsid, so its pid is the group of all
        if sh(nginx_cmd(self, ">>" .. self.dir .. "/start.log 2>&1")) then
            for _ = 1, 100 do
                self.pid = (read(self.dir .. "/nginx.pid") or ""):match("%d+")
                if self.pid then break end
                helper.sleep(20)
            end
            if self.pid then
                f = assert(io.open(self.dir .. "/stop", "w"))
                -- (`kill -SIG -PGID`: dash, sh here, takes no `--`)
                f:write("kill -KILL -", self.pid, " 2>/dev/null\n")
                f:close()
                if no_health or self:wait_ready() then return self end
            end
        end
        self:stop()
        if not (read(self.dir .. "/error.log") or ""):find("Address already in use") then break end
    end
    error("nginx did not start:\n" .. (read(self.dir .. "/start.log") or "") ..
        (read(self.dir .. "/error.log") or ""))
end
_M.start_conf = start_conf

--- Starts nginx with examples/openresty/nginx.conf. opts: workers, redis (a
-- helper server), http, server, init (text for the template's @HTTP@,
-- @SERVER@ and @INIT@ markers), lua_path (put before the template's
-- lua_package_path). The text may name @PORT_NEXT@, a second port (the
-- first plus one) for a server of its own.
function _M.start(opts)
    local repo = read_cmd("pwd"):gsub("%s+$", "")
    local template = assert(read(repo .. "/examples/openresty/nginx.conf"))
    return start_conf(function(port)
        return render(template, {
            REPO = repo, PORT = port, PORT_NEXT = port + 1, WORKERS = opts.workers or 1,
            REDIS_HOST = "127.0.0.1", REDIS_PORT = opts.redis.port,
            USER = read_cmd("id -u"):match("^0%s") and "user root;" or "",
            HTTP = opts.http or "", SERVER = opts.server or "", INIT = opts.init or "",
            LUA_PATH = opts.lua_path,
        })
    end)
end

function Nginx:url(path) return string.format("http://127.0.0.1:%d%s", self.port, path) end

-- curl's output with -w '\n%{http_code} %{time_total}': body (one final
-- newline cut, as ngx.say adds it), HTTP code, seconds taken.
local function parse(out)
    local body, code, took = out:match("^(.-)\n(%d+) ([%d.]+)$")
    if not body then return out, nil, nil end
    return (body:gsub("\n$", "")), tonumber(code), tonumber(took)
end

--- curl in the foreground: body, HTTP code, seconds taken.
function Nginx:get(path, max_time)
    local out = read_cmd(string.format(
        "curl -s --max-time %d -w '\\n%%{http_code} %%{time_total}' %s", max_time or 20,
        helper.quote(self:url(path))))
    return parse(out)
end

function Nginx:wait_ready()
    for _ = 1, 100 do
        local _, code = self:get("/health", 2)
        if code == 200 then return true end
        helper.sleep(50)
    end
    return false
end

-- curl --parallel over paths, `at_once` at a time, with the given
-- write-out line per transfer; output(i) names where the body of path i
-- goes. curl's output (the write-out lines, in the order the transfers end).
local function curl_parallel(self, paths, at_once, write_out, output)
    local dir = helper.fresh_dir("curl")
    local conf = { "globoff", "write-out = \"" .. write_out .. "\\n\"" }
    for i, path in ipairs(paths) do
        conf[#conf + 1] = string.format('url = "%s"\noutput = "%s"', self:url(path), output(dir, i))
    end
    local f = assert(io.open(dir .. "/curl.conf", "w"))
    f:write(table.concat(conf, "\n"), "\n")
    f:close()
    return read_cmd(string.format("curl -s --no-progress-meter --parallel --parallel-max %d "
        .. "--max-time 60 -K %s", at_once, helper.quote(dir .. "/curl.conf"))), dir
end

--- Requests to paths (a list), `at_once` at a time (curl --parallel):
-- their HTTP codes ("200"; "000" when curl got no answer) and bodies (nil
-- when none came), both in the order of paths. curl writes its -w lines in
-- the order the transfers end, not that of its URLs: each line names its
-- output file (filename_effective), which tells whose code it is.
function Nginx:parallel(paths, at_once)
    local out, dir = curl_parallel(self, paths, at_once, "%{filename_effective} %{http_code}",
        function(d, i) return string.format("%s/r%d", d, i) end)
    local codes, bodies = {}, {}
    for i, code in out:gmatch("/r(%d+) (%d+)") do codes[tonumber(i)] = code end
    for i = 1, #paths do
        codes[i] = codes[i] or "none"
        bodies[i] = read(dir .. "/r" .. i)
    end
    return codes, bodies
end

--- As parallel, for a benchmark: the bodies go to /dev/null (a file per
-- response costs curl more than nginx takes to answer), and each answer
-- says its HTTP code and the value of its response header `header`: a
-- list of { code, value } (value "" when the header was absent), in the
-- order the transfers ended.
function Nginx:parallel_header(paths, at_once, header)
    local out = curl_parallel(self, paths, at_once, "%{http_code} %header{" .. header .. "}",
        function() return "/dev/null" end)
    local answers = {}
    for line in out:gmatch("[^\n]+") do
        local code, value = line:match("^(%d+) ?(.*)$")
        if code then answers[#answers + 1] = { code, value } end
    end
    return answers
end

--- curl in the background (at most max_time s, default 30); returns a
-- handle with done() and wait().
function Nginx:bg(path, max_time)
    local dir = helper.fresh_dir("curl")
    sh(string.format("sh -c %s &", helper.quote(string.format(
        "curl -s --max-time %s -w '\\n%%{http_code} %%{time_total}' %s >%s/out 2>&1; echo $? >%s/status",
        tostring(max_time or 30), helper.quote(self:url(path)), dir, dir))))
    local h = {}
    function h.done() return read(dir .. "/status") ~= nil end
    function h.wait()
        for _ = 1, 1500 do
            if h.done() then
                return parse(read(dir .. "/out"))
            end
            helper.sleep(20)
        end
        return nil, "curl did not finish"
    end
    return h
end

--- The error log's lines of level error and worse (a crash in Lua shows there).
-- Not nginx's own bind retries: a port another process still held for a
-- moment costs a logged retry, and nginx started (it gave up otherwise).
--- Lines of the error log that errors() leaves out from now on: those
-- containing text (plain), for a request that provokes one on purpose.
function Nginx:expect_error(text)
    self.expected = self.expected or {}
    self.expected[#self.expected + 1] = text
end

local function expected(self, line)
    for _, text in ipairs(self.expected or {}) do
        if line:find(text, 1, true) then return true end
    end
    return false
end

function Nginx:errors()
    local out = {}
    for line in (read(self.dir .. "/error.log") or ""):gmatch("[^\n]+") do
        local bind_retry = line:find("bind() to ", 1, true) and line:find("(98: Address already in use)", 1, true)
        if not bind_retry and not expected(self, line) and (line:find("%[error%]") or line:find("%[crit%]")
            or line:find("%[alert%]") or line:find("%[emerg%]")) then
            out[#out + 1] = line
        end
    end
    return out
end

--- Stops nginx gracefully, then kills whatever of its group is left.
function Nginx:stop()
    if not self.pid then return end
    sh("kill -QUIT " .. self.pid .. " 2>/dev/null")
    for _ = 1, 150 do
        if not group_alive(self.pid) then break end
        helper.sleep(20)
    end
    -- (a negative pid, the group: dash's kill takes no "--")
    sh("kill -KILL -" .. self.pid .. " 2>/dev/null")
    os.remove(self.dir .. "/stop")
    self.pid = nil
end

return _M
