-- Runs one benchmark case in a process of its own, the way bench/floor runs
-- the floor: setup, warm-up, INFO commandstats, the measured loop, INFO
-- commandstats again, teardown. Prints one line in the floor's format:
--   ns_per_op=<float> cpu_ns_per_op=<float> ops=<n> calls=<cmd>:<count>,...
--   [m_<name>=<value> ...]
-- (cpu: os.clock(), this process's CPU time, as the floor's clock(3))
-- usage: lua bench/case.lua CASE_FILE KEY OPS WARMUP URL...
-- (bench/bench.lua calls it; the case file format is in bench/README.md)
local core = require "redlock.core"
local options = require "redlock.options"

local case_file, key, ops, warmup = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4])
local urls = {}
for i = 5, #arg do urls[#urls + 1] = arg[i] end
assert(case_file and key and ops and warmup and #urls > 0,
    "usage: case.lua CASE_FILE KEY OPS WARMUP URL...")

local def = dofile(case_file)

-- Connections of their own for INFO, so the case's connections carry only
-- the case's commands; INFO itself is left out of the counts.
local stat_conns = {}
for i, url in ipairs(urls) do stat_conns[i] = core.conn(options.parse_url(url)) end

local function commandstats()
    local calls = {}
    for _, conn in ipairs(stat_conns) do
        local info = assert(conn:command("INFO", "commandstats"))
        for name, n in info:gmatch("cmdstat_([^:]+):calls=(%d+)") do
            if name ~= "info" then calls[name] = (calls[name] or 0) + tonumber(n) end
        end
    end
    return calls
end

local function deltas(before, after)
    local names = {}
    for name, n in pairs(after) do
        if n ~= (before[name] or 0) then names[#names + 1] = name end
    end
    table.sort(names)
    for i, name in ipairs(names) do names[i] = name .. ":" .. (after[name] - (before[name] or 0)) end
    return table.concat(names, ",")
end

local ctx = { urls = urls, key = key, redlock = require "redlock", core = core }
local state = def.setup and def.setup(ctx) or ctx

local metrics
if def.op then
    local op = def.op
    for i = 1, warmup do op(state, i) end
end
local before = commandstats()
local c0, t0 = os.clock(), core.now()
if def.op then
    local op = def.op
    for i = 1, ops do op(state, i) end
else
    metrics = def.run(state, ops)
end
local t1, c1 = core.now(), os.clock()
local after = commandstats()
if def.teardown then def.teardown(state) end

local line = { string.format("ns_per_op=%.1f cpu_ns_per_op=%.1f ops=%d calls=%s", (t1 - t0) * 1e6 / ops,
    (c1 - c0) * 1e9 / ops, ops, deltas(before, after)) }
for name, v in pairs(metrics or {}) do
    line[#line + 1] = string.format("m_%s=%s", name, tostring(v))
end
print(table.concat(line, " "))
for _, conn in ipairs(stat_conns) do conn:close() end
