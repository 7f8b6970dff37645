--- make torture: per mode, starts the servers (torture/modes.lua) and
-- the fenced resource, the workload's processes (plain Lua clients, the
-- redlock command, nginx workers), then injects faults drawn from the
-- seed (torture/faults.lua), one after another, each healed, for
-- DURATION seconds; stops the workload, waits for every lock to end,
-- looks for what was left in the servers, and runs the checker over the
-- whole history (torture/checker.lua). Prints, per mode, the counts and
-- every violation with the seed, the fault schedule and the smallest
-- window of history that shows it; exits non-zero on any violation.
-- usage (torture/run.sh sets the paths): run.lua SEED MODES DURATION [RECORD]
local helper = require "helper"
local core = require "redlock.core"
local record = require "torture.record"
local rng_mod = require "torture.rng"
local topology = require "torture.topology"
local modes = require "torture.modes"
local faults = require "torture.faults"
local workers = require "torture.workers"
local results = require "torture.results"

local format = string.format
local now, sleep = core.now, core.sleep

local seed_arg, modes_arg, duration_arg, record_arg = ...
local SEED = tonumber(seed_arg)
local DURATION = tonumber(duration_arg) or 60
local RECORD = record_arg == "1"
local REPO = os.getenv("TORTURE_REPO") or "."
local TREE = os.getenv("TORTURE_TREE") or REPO

local function say(...) io.stdout:write(format(...), "\n"); io.stdout:flush() end

local function write_file(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
end

-- The client options every workload client shares.
local BASE_OPTS = { connect_timeout = 500, timeout = 500, retry_delay = 20, retry_jitter = 20 }
-- The bound of a call past its wait: a connect and a reply timeout each
-- way, a reconnect, and the machine's own delays (2 cores, shared).
local SLACK = 4000

local function run_mode(ctx)
    local name, mode, seed, dir = ctx.name, ctx.mode, ctx.seed, ctx.dir
    local plan = mode.plan
    local max_ttl = 0
    for _, t in ipairs(plan.ttls) do max_ttl = math.max(max_ttl, t) end
    local max_wait = 0
    for _, w in ipairs(plan.waits) do max_wait = math.max(max_wait, w) end
    ctx.max_ttl = max_ttl
    ctx.min_ttl = math.huge
    for _, t in ipairs(plan.ttls) do ctx.min_ttl = math.min(ctx.min_ttl, t) end
    ctx.master = function() return mode.master and mode.master(ctx) or ctx.data[1] end
    ctx.proc = function(pname)
        for _, p in ipairs(ctx.procs) do
            if p.name == pname then return p end
        end
        error("no process " .. pname)
    end

    -- the resource: a server of its own, in this namespace, never faulted
    local resource = helper.start_server()
    ctx.resource = resource
    mode.setup(ctx)
    local client_spaces = {}
    for i = 1, (mode.workload.plain_ns or 0) do client_spaces[i] = ctx.topo:client_space("c" .. i) end

    -- every client's configuration, in one file they all load
    local config = { seed = seed, history = ctx.history, stop = ctx.stop, resource = resource.socket,
        clients = {}, tree = TREE, repo = REPO }
    local stream = 0
    local function client_conf(cname, extra)
        stream = stream + 1
        local opts = {}
        for k, v in pairs(BASE_OPTS) do opts[k] = v end
        for k, v in pairs(mode.client_opts and mode.client_opts(stream) or {}) do opts[k] = v end
        for k, v in pairs(extra or {}) do opts[k] = v end
        opts.servers = ctx.lock_servers
        config.clients[cname] = { opts = opts, plan = plan, stream = stream }
        return config.clients[cname]
    end
    local names = {}
    for i = 1, mode.workload.plain or 0 do
        names[#names + 1] = { "p" .. i }
    end
    for i = 1, mode.workload.plain_ns or 0 do
        names[#names + 1] = { "n" .. i, client_spaces[i] }
    end
    for _, n in ipairs(names) do client_conf(n[1]) end
    if mode.workload.cli then
        local c = client_conf("cli")
        c.cli_servers = ctx.cli_servers
        c.cli_args = mode.cli_args or {}
    end
    if mode.workload.nginx then client_conf("ngx") end
    ctx.config_path = dir .. "/config.lua"
    write_file(ctx.config_path, "return " .. record.dump(config) .. "\n")

    local t0 = now()
    ctx.t0 = t0
    for _, n in ipairs(names) do
        ctx.procs[#ctx.procs + 1] = workers.plain(ctx, n[1], n[2])
    end
    if mode.workload.cli then ctx.procs[#ctx.procs + 1] = workers.cli(ctx, "cli") end
    if mode.workload.nginx then
        for _, p in ipairs(workers.nginx(ctx, mode.workload.nginx)) do ctx.procs[#ctx.procs + 1] = p end
    end
    say("%s: %s, seed %d, %d s; workload: %d processes; run directory %s", name, mode.title, seed, DURATION,
        #ctx.procs, dir)

    -- the nemesis: one fault after another until the duration is over
    local rng = rng_mod.new(seed, 1)
    local fault_log = record.writer(dir .. "/faults.log")
    local fault_records = {}
    local t_end = t0 + DURATION * 1000
    sleep(2000)
    while true do
        local f, p = faults.draw(ctx, rng)
        local gap = rng:int(1000, 3000)
        if now() + p.len + (p.total or 0) + gap > t_end then break end
        local start = now()
        f.inject(ctx, p)
        sleep(p.len)
        local heal = now()
        f.heal(ctx, p)
        if mode.settle then mode.settle(ctx, p) end
        local healed = now()
        local taint = f.taints and f.taints(ctx, p) or {}
        local rec = { "ev", "fault", "kind", p.kind, "target", p.target, "server", p.server, "start", start,
            "heal", heal, "healed", healed, "len", p.len, "pid", p.pid, "lease", taint.lease and 1 or nil,
            "counter", taint.counter and 1 or nil, "clock", taint.clock, "jump", p.jump, "evicted", p.evicted,
            "moved", p.moved ~= nil and tostring(p.moved) or nil, "to", p.to, "slot", p.slot, "replica", p.replica,
            "reply", p.reply }
        fault_log(rec)
        fault_records[#fault_records + 1] = record.decode(record.encode(rec))
        sleep(gap)
    end
    local t_stop = now()

    -- the end: the workload told to stop, waited for; every lock ended
    write_file(ctx.stop, "")
    local stuck = workers.stop_all(ctx, max_wait + 2 * max_ttl + SLACK + 5000)
    sleep(max_ttl + 2500)
    local leftovers = {}
    for _, srv in ipairs(mode.leftover_servers and mode.leftover_servers(ctx) or ctx.data) do
        local out = srv.server:cli("--scan")
        for key in out:gmatch("[^\n]+") do
            if not key:find("redlock:fences$") and not key:find("^torture:junk:") then
                leftovers[#leftovers + 1] = { server = srv.name, key = key, type = srv.server:cli("TYPE", key),
                    pttl = srv.server:cli("PTTL", key) }
            end
        end
    end

    -- the history
    local records = record.read_dir(ctx.history)
    local res = {}
    for key in resource:cli("KEYS", "log:*"):gmatch("[^\n]+") do
        local lines = {}
        for line in resource:cli("LRANGE", key, "0", "-1"):gmatch("[^\n]+") do lines[#lines + 1] = line end
        res[key:sub(5)] = lines
    end
    local pauses = {}
    for _, f in ipairs(fault_records) do
        if f.kind == "pause_client" then
            local c = ctx.proc(f.target).client_of(f.pid)
            if c then
                pauses[c] = pauses[c] or {}
                table.insert(pauses[c], { from = tonumber(f.start), to = tonumber(f.heal) })
            end
        end
    end
    local meta = { resource = res, leftovers = leftovers, stuck = stuck, ngx_crashes = ctx.ngx_crashes, mode = name,
        max_ttl = max_ttl, t0 = t0,
        t_stop = t_stop, slack = SLACK, pauses = pauses, resume_bound = max_ttl + max_wait + SLACK,
        limit = plan.limit, seed = seed, duration = DURATION }
    -- (torture/recheck.lua runs the checker again over the saved run)
    write_file(dir .. "/meta.lua", "return " .. record.dump(meta) .. "\n")
    local report = results.report(meta, records, fault_records)

    return report
end

-- A mode's run, its servers and processes stopped whatever happens; a
-- failure of the run itself (a server that would not start, a group that
-- did not settle after a fault) is reported as the mode's failure.
local function run_one(name, seed)
    local dir = helper.fresh_dir("run-" .. name)
    local ctx = {
        name = name, mode = modes[name], seed = seed, dir = dir, history = dir .. "/history", stop = dir .. "/stop",
        topo = topology.new(), procs = {},
    }
    assert(os.execute("mkdir -p " .. ctx.history))
    local ok, report = xpcall(run_mode, debug.traceback, ctx)
    workers.teardown(ctx)
    ctx.topo:destroy()
    helper.stop_all()
    if ok then return report end
    say("%s: the run itself failed (seed %d): %s", name, seed, tostring(report))
    return { name = name, seed = seed, duration = DURATION, failed = tostring(report), violations = {}, faults = {},
        counts = { holds = 0, overlaps_allowed = 0 }, allowed = {} }
end

local list = {}
if modes_arg == "all" or not modes_arg or modes_arg == "" then
    list = modes.ORDER
else
    for m in modes_arg:gmatch("[^,%s]+") do list[#list + 1] = m end
end
local why = topology.missing()
if why then
    -- make test's smoke is skipped, in one line, where make torture fails
    if os.getenv("TORTURE_SKIP_MISSING") == "1" then
        say("torture-smoke: skipped: %s", why)
        os.exit(0)
    end
    say("torture: cannot run: %s", why)
    os.exit(2)
end
local reports, failed = {}, false
for _, m in ipairs(list) do
    if not modes[m] then
        say("torture: no mode %q (modes: %s)", m, table.concat(modes.ORDER, ", "))
        os.exit(2)
    end
end
for _, m in ipairs(list) do
    local report = run_one(m, SEED)
    reports[#reports + 1] = report
    if report.run then results.print(report, say) end
    if #report.violations > 0 or report.failed then failed = true end
end
results.summary(reports, say)
if RECORD then results.write_docs(reports, REPO .. "/docs/guarantees.md", SEED, DURATION) end
os.exit(failed and 1 or 0)
