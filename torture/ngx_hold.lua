--- The workload inside nginx: GET /hold runs one hold (torture/workload.lua)
-- over the worker's client, its calls on cosockets; the fenced resource
-- is reached over a cosocket to its unix socket (RESP spoken here: no
-- Redis library for nginx is assumed). Each worker records its history
-- in a file of its own, named after its pid.
local redlock = require "redlock"
local core = require "redlock.core"
local record = require "torture.record"
local resource = require "torture.resource"
local rng_mod = require "torture.rng"
local workload = require "torture.workload"

local ngx = ngx
local concat, tonumber, tostring, select = table.concat, tonumber, tostring, select

local _M = {}

local config, w, focus

--- init_by_lua: the run's configuration.
function _M.init(path) config = dofile(path) end

-- One command on a cosocket to the resource; the reply as a Lua value
-- (an error reply: nil, message).
local function read_reply(sock)
    local line, err = sock:receive("*l")
    if not line then return nil, err end
    local t, rest = line:sub(1, 1), line:sub(2)
    if t == "+" then return rest end
    if t == "-" then return nil, rest end
    if t == ":" then return tonumber(rest) end
    if t == "$" then
        local n = tonumber(rest)
        if n < 0 then return ngx.null end
        local data, derr = sock:receive(n + 2)
        if not data then return nil, derr end
        return data:sub(1, n)
    end
    if t == "*" then
        local out = {}
        for i = 1, tonumber(rest) do
            local v, verr = read_reply(sock)
            if v == nil then return nil, verr end
            out[i] = v
        end
        return out
    end
    return nil, "bad reply " .. line
end

local function call(...)
    local sock = ngx.socket.tcp()
    sock:settimeouts(1000, 5000, 5000)
    local ok, err = sock:connect("unix:" .. config.resource)
    if not ok then return nil, err end
    local parts = { "*" .. select("#", ...) .. "\r\n" }
    for i = 1, select("#", ...) do
        local a = tostring((select(i, ...)))
        parts[#parts + 1] = "$" .. #a .. "\r\n" .. a .. "\r\n"
    end
    ok, err = sock:send(concat(parts))
    if not ok then return nil, err end
    local r, rerr = read_reply(sock)
    sock:setkeepalive(10000, 16)
    return r, rerr
end

-- The worker's workloads: its holds, and (a plan with a focus) the
-- focused ones, recorded as its own (ids ngx-PID:fN).
local function setup()
    if w then return end
    local pid = ngx.worker.pid()
    local name = "ngx-" .. pid
    local me = config.clients.ngx
    local env = {
        client = redlock.new(me.opts), rng = rng_mod.new(config.seed, me.stream * 100000 + pid), name = name,
        now = core.now, sleep = function(ms) ngx.sleep(ms / 1000) end,
        log = record.writer(config.history .. "/" .. name .. ".log"), resource = resource.ops(call), plan = me.plan,
    }
    w = workload.new(env)
    if me.plan.focus then
        env.plan, env.tag = me.plan.focus, "f"
        env.rng = rng_mod.new(config.seed, me.stream * 100000 + pid + 50000)
        focus = workload.new(env)
    end
end

--- GET /hold: one hold (/hold?focus=1: one of the focused ones).
-- (after a failure that is not a refusal, a pause before the next
-- request: a server that is down answers at once)
local BACKOFF = { connection = true, server = true, ["no quorum"] = true, replicas = true, crash = true }
function _M.hold()
    setup()
    local code = ((ngx.var.arg_focus and focus) or w):hold()
    if BACKOFF[code] then ngx.sleep(0.1) end
    ngx.say("ok")
end

return _M
