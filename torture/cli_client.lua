--- The workload through the `redlock` command: one `redlock run` after
-- another (each a hold drawn as the plain clients draw theirs), the
-- command it runs being torture/cli_hold.lua, which does the hold's
-- fenced work and records it. This loop records what only it sees: the
-- time before the command started (the acquire's sent time, passed to
-- the hold), and failures to acquire, from the exit status.
-- usage: cli_client.lua CONFIG NAME
local core = require "redlock.core"
local record = require "torture.record"
local rng_mod = require "torture.rng"
local workload = require "torture.workload"

local format, quote = string.format, function(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local config_path, name = ...
local config = dofile(config_path)
local me = config.clients[name]
local plan, opts = me.plan, me.opts
local LUA = os.getenv("TORTURE_LUA") or "lua5.4"

local function exists(path)
    local f = io.open(path)
    if f then f:close() end
    return f ~= nil
end

local log = record.writer(config.history .. "/" .. name .. ".log")
log { "ev", "start", "c", name, "t", core.now() }
local rng = rng_mod.new(config.seed, me.stream)
local n = 0
while not exists(config.stop) do
    n = n + 1
    local id = name .. ":" .. n
    local d = workload.draw(rng, plan)
    local args = { quote(config.tree .. "/bin/redlock"), "run", "-q", "-t", d.ttl, "-w", d.wait,
        "--timeout", opts.timeout, "--connect-timeout", opts.connect_timeout }
    for _, s in ipairs(me.cli_servers) do
        args[#args + 1] = "-s"
        args[#args + 1] = quote(s)
    end
    for _, a in ipairs(me.cli_args) do args[#args + 1] = quote(a) end
    if d.kind == "reader" then args[#args + 1] = "--shared" end
    if d.kind == "permit" then
        args[#args + 1] = "--limit"
        args[#args + 1] = plan.limit
    end
    if d.kind == "group" then
        for _, k in ipairs(d.keys) do
            args[#args + 1] = "--key"
            args[#args + 1] = quote(k)
        end
    else
        args[#args + 1] = quote(d.keys[1])
    end
    local sent = core.now()
    args[#args + 1] = "--"
    for _, a in ipairs({ LUA, config.repo .. "/torture/cli_hold.lua", config_path, name, id, d.kind,
        table.concat(d.keys, ","), d.ttl, d.wait, format("%.3f", sent), d.pause }) do
        args[#args + 1] = quote(a)
    end
    local _, how, status = os.execute(table.concat(args, " ") .. " 2>/dev/null")
    local ret = core.now()
    if how == "exit" then status = tonumber(status) else status = -1 end
    -- the hold recorded itself when its command ran; a failure to acquire
    -- is recorded here, its code read from the exit status
    local f = io.open(config.history .. "/cli-held." .. id)
    if f then
        f:close()
        os.remove(config.history .. "/cli-held." .. id)
        log { "ev", "clirun", "id", id, "sent", sent, "ret", ret, "status", status }
    else
        -- (cli.md's exit statuses: 1 not acquired, 69 unreachable or no
        -- quorum or too few replicas, 76 and 77 Redis answered an error)
        local code = status == 1 and (d.wait == 0 and "locked" or "timeout")
            or status == 69 and (#me.cli_servers > 1 and "no quorum" or "connection")
            or (status == 76 or status == 77) and "server"
            or ("exit status " .. tostring(status))
        log { "ev", "acq", "id", id, "c", name, "kind", d.kind, "keys", table.concat(d.keys, ","), "ttl", d.ttl,
            "wait", d.wait, "style", "cli", "sent", sent, "ret", ret, "ok", 0, "code", code }
    end
    core.sleep(status == 69 and rng:int(50, 150) or rng:int(0, 20))
end
log { "ev", "end", "c", name, "t", core.now() }
