-- Runs one benchmark case in a process of its own, the way bench/floor runs
-- the floor: setup, warm-up, INFO commandstats and the servers' CPU time,
-- the measured loop, the servers' CPU time and INFO commandstats again,
-- teardown. Prints one line in the floor's format:
--   ns_per_op=<float> cpu_ns_per_op=<float> [server_ns_per_op=<float>]
--   ops=<n> calls=<cmd>:<count>,... usec=<cmd>:<usec>,... [m_<name>=<value> ...]
-- (cpu: os.clock(), this process's CPU time, as the floor's clock(3);
-- server: the redis-servers' CPU time from /proc/<pid>/task/*/schedstat,
-- as the floor reads it)
-- usage: lua bench/case.lua CASE_FILE KEY OPS WARMUP URL...
-- (bench/bench.lua calls it; the case file format is in bench/README.md)
local core = require "redlock.core"
local addresses = require "redlock.addresses"

local case_file, key, ops, warmup = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4])
local urls = {}
for i = 5, #arg do urls[#urls + 1] = arg[i] end
assert(case_file and key and ops and warmup and #urls > 0,
    "usage: case.lua CASE_FILE KEY OPS WARMUP URL...")

local def = dofile(case_file)

-- Connections of their own for INFO, so the case's connections carry only
-- the case's commands; INFO itself is left out of the counts.
local stat_conns = {}
for i, url in ipairs(urls) do stat_conns[i] = core.conn(addresses.parse_url(url)) end

-- calls and usec per command, summed over the servers
local function commandstats()
    local calls, usec = {}, {}
    for _, conn in ipairs(stat_conns) do
        local info = assert(conn:command("INFO", "commandstats"))
        for name, n, us in info:gmatch("cmdstat_([^:]+):calls=(%d+),usec=(%d+)") do
            if name ~= "info" then
                calls[name] = (calls[name] or 0) + tonumber(n)
                usec[name] = (usec[name] or 0) + tonumber(us)
            end
        end
    end
    return calls, usec
end

-- "name:delta,..." of the commands whose calls changed
local function deltas(before, after, calls_before, calls_after)
    local names = {}
    for name, n in pairs(calls_after) do
        if n ~= (calls_before[name] or 0) then names[#names + 1] = name end
    end
    table.sort(names)
    for i, name in ipairs(names) do names[i] = name .. ":" .. (after[name] - (before[name] or 0)) end
    return table.concat(names, ",")
end

-- The servers' process ids (INFO server; the servers run on this machine).
local pids = {}
for i, conn in ipairs(stat_conns) do
    pids[i] = assert(conn:command("INFO", "server")):match("process_id:(%d+)")
end

-- ns on CPU of every thread of the servers so far (the first field of
-- /proc/<pid>/task/<tid>/schedstat: precise, where /proc/<pid>/stat counts
-- 10 ms ticks); nil when it cannot be read
local function server_cpu_ns()
    local total = 0
    for _, pid in ipairs(pids) do
        local ls = io.popen("ls /proc/" .. pid .. "/task 2>/dev/null")
        local threads = 0
        for tid in ls:lines() do
            local f = io.open("/proc/" .. pid .. "/task/" .. tid .. "/schedstat")
            local ns = f and tonumber(f:read("*l"):match("^(%d+)"))
            if f then f:close() end
            if ns then total, threads = total + ns, threads + 1 end
        end
        ls:close()
        if threads == 0 then return nil end
    end
    return total
end

local ctx = { urls = urls, key = key, redlock = require "redlock", core = core }
local state = def.setup and def.setup(ctx) or ctx

local metrics
if def.op then
    local op = def.op
    for i = 1, warmup do op(state, i) end
end
local before, usec_before = commandstats()
local s0 = server_cpu_ns()
local c0, t0 = os.clock(), core.now()
if def.op then
    local op = def.op
    for i = 1, ops do op(state, i) end
else
    metrics = def.run(state, ops)
end
local t1, c1 = core.now(), os.clock()
local s1 = server_cpu_ns()
local after, usec_after = commandstats()
if def.teardown then def.teardown(state) end

local line = { string.format("ns_per_op=%.1f cpu_ns_per_op=%.1f", (t1 - t0) * 1e6 / ops,
    (c1 - c0) * 1e9 / ops) }
if s0 and s1 then line[#line + 1] = string.format("server_ns_per_op=%.1f", (s1 - s0) / ops) end
line[#line + 1] = string.format("ops=%d calls=%s usec=%s", ops, deltas(before, after, before, after),
    deltas(usec_before, usec_after, before, after))
for name, v in pairs(metrics or {}) do
    line[#line + 1] = string.format("m_%s=%s", name, tostring(v))
end
print(table.concat(line, " "))
for _, conn in ipairs(stat_conns) do conn:close() end
