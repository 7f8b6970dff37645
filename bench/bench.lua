-- The benchmark driver behind `make bench` (bench/run.sh sets the paths and
-- cleans up). For every case in bench/cases/*.lua it starts the servers the
-- case needs, then for each round runs the floor (bench/floor, C) and the
-- case (bench/case.lua, Lua) one after the other, A B A B. It checks every
-- run's INFO commandstats deltas against the case's declared commands per
-- operation, so a change in round trips fails the benchmark instead of only
-- slowing it, and prints medians and ratios to the floor measured in the same
-- run. Writes runs.csv, summary.csv and chart.png under the output directory.
--
-- usage: lua bench/bench.lua [--rounds N] [--scale X] [--only id,id]
--                            [--unix] [--out DIR]
-- Exits 1 when a run fails or its commands differ from the declared ones;
-- timing targets are reported, and fail the exit status only with --strict.
local helper = require "helper"

local FLOOR = os.getenv("REDLOCK_FLOOR") or "build/bench/floor"
local LUA = os.getenv("REDLOCK_LUA") or "lua5.4"
local BUILD = os.getenv("REDLOCK_BUILD") or "build"

local format, concat = string.format, table.concat

-- options
local rounds, scale, only, unix, out_dir, strict = 25, 1, nil, false, "bench/results", false
do
    local i = 1
    while i <= #arg do
        local a = arg[i]
        if a == "--rounds" then rounds = assert(tonumber(arg[i + 1]), "--rounds N"); i = i + 1
        elseif a == "--scale" then scale = assert(tonumber(arg[i + 1]), "--scale X"); i = i + 1
        elseif a == "--only" then
            only = {}
            for id in (arg[i + 1] or ""):gmatch("[^,]+") do only[id] = true end
            i = i + 1
        elseif a == "--out" then out_dir = assert(arg[i + 1], "--out DIR"); i = i + 1
        elseif a == "--unix" then unix = true
        elseif a == "--strict" then strict = true
        else
            error("unknown argument " .. a .. " (--rounds N --scale X --only id,id --unix --out DIR"
                .. " --strict)")
        end
        i = i + 1
    end
end

local function median(t)
    local s = {}
    for i, v in ipairs(t) do s[i] = v end
    table.sort(s)
    local n = #s
    if n == 0 then return nil end
    if n % 2 == 1 then return s[(n + 1) / 2] end
    return (s[n / 2] + s[n / 2 + 1]) / 2
end

-- "a:1,b:2" -> {a=1, b=2}
local function parse_calls(s)
    local t = {}
    for name, n in (s or ""):gmatch("([^:,]+):(%d+)") do t[name] = tonumber(n) end
    return t
end

-- Compares counts per operation with the declared ones; nil or a message.
-- occasional: name -> how many more per op may come now and then (the
-- fence counter raised to the server's clock).
local function check_calls(calls, ops, want, occasional)
    local bad = {}
    local names = {}
    for name in pairs(calls) do names[#names + 1] = name end
    for name in pairs(want) do if not calls[name] then names[#names + 1] = name end end
    table.sort(names)
    for _, name in ipairs(names) do
        local got = (calls[name] or 0) / ops
        local base = want[name] or 0
        local extra = occasional and occasional[name]
        if got ~= base and not (extra and got >= base and got <= base + extra) then
            bad[#bad + 1] = format("%s %g per op (declared %d)", name, got, want[name] or 0)
        end
    end
    if #bad > 0 then return concat(bad, "; ") end
end

local function calls_text(calls, ops)
    local names = {}
    for name in pairs(calls) do names[#names + 1] = name end
    table.sort(names)
    for i, name in ipairs(names) do names[i] = format("%s=%g", name, calls[name] / ops) end
    return concat(names, " ")
end

-- Runs one process; returns its parsed result line or nil, message.
local function run(cmd)
    local p = assert(io.popen(cmd .. " 2>&1"))
    local output = p:read("*a")
    local ok = p:close()
    local line = output:match("(ns_per_op=[^\n]*)")
    if not ok or not line then return nil, (output:gsub("%s+$", "")) end
    local r = { ns = tonumber(line:match("ns_per_op=([%d.]+)")),
        cpu = tonumber(line:match("cpu_ns_per_op=([%d.]+)")), ops = tonumber(line:match("ops=(%d+)")),
        calls = parse_calls(line:match("calls=(%S*)")), metrics = {} }
    for name, v in line:gmatch("m_([%w_]+)=(%S+)") do r.metrics[name] = tonumber(v) or v end
    return r
end

-- the cases
local cases = {}
do
    local p = assert(io.popen("ls bench/cases/*.lua 2>/dev/null"))
    for file in p:lines() do
        local def = dofile(file)
        def.file = file
        assert(def.id and def.title and def.commands, file .. ": id, title and commands are required")
        if not only or only[def.id] then cases[#cases + 1] = def end
    end
    p:close()
end
assert(#cases > 0, "no benchmark cases selected")
local by_id = {}
for _, c in ipairs(cases) do by_id[c.id] = c end

-- servers, shared by cases with the same config
local pools = {}
local function servers_for(def)
    local want = def.servers or 1
    local cfg = def.server_config or {}
    local name = concat(cfg, "\n")
    local pool = pools[name] or {}
    pools[name] = pool
    while #pool < want do pool[#pool + 1] = helper.start_server { config = cfg } end
    local urls, addrs = {}, {}
    for i = 1, want do
        local s = pool[i]
        urls[i] = unix and ("unix://" .. s.socket) or s:url()
        addrs[i] = unix and s.socket or ("127.0.0.1:" .. s.port)
    end
    return urls, addrs
end

local function shell_list(t)
    local q = {}
    for i, v in ipairs(t) do q[i] = helper.quote(v) end
    return concat(q, " ")
end

local failures = {}
local function fail(msg)
    failures[#failures + 1] = msg
    io.stderr:write("FAIL ", msg, "\n")
end

for _, def in ipairs(cases) do
    def.urls, def.addrs = servers_for(def)
    def.ops = math.max(1, math.floor((def.iterations or 1000) * scale))
    def.warmup = math.max(0, math.floor((def.warmup or 200) * scale))
    def.a, def.b, def.a_cpu, def.b_cpu = {}, {}, {}, {}
end

local raw = {}
local started = os.time()
io.write(format("redlock bench: %d case(s), %d rounds, %s, floor %s\n", #cases, rounds,
    unix and "unix sockets" or "TCP 127.0.0.1", FLOOR))
for round = 1, rounds do
    for _, def in ipairs(cases) do
        local key = format("bench:%s:%d:%d", def.id, round, os.time())
        local function floor_cmd(mode, k)
            return format("%s -n %d -w %d -k %s %s %s", FLOOR, def.ops, def.warmup, helper.quote(k), mode,
                shell_list(def.addrs))
        end
        local sides = {}
        if def.floor then
            sides[#sides + 1] = { "floor", floor_cmd(def.floor, key .. ":a"),
                def.floor_commands or def.commands }
        end
        if def.floor_b then
            sides[#sides + 1] = { "case", floor_cmd(def.floor_b, key .. ":b"), def.commands }
        else
            sides[#sides + 1] = { "case", format("LUA_PATH=%s LUA_CPATH=%s %s bench/case.lua %s %s %d %d %s",
                helper.quote("lua/?.lua;lua/?/init.lua;bench/?.lua;spec/?.lua;;"),
                helper.quote(BUILD .. "/?.so;;"), LUA, helper.quote(def.file), helper.quote(key .. ":b"),
                def.ops, def.warmup, shell_list(def.urls)), def.commands }
        end
        -- A B in odd rounds, B A in even ones: a load that drifts during a
        -- round weighs on both sides alike
        if round % 2 == 0 then sides[1], sides[#sides] = sides[#sides], sides[1] end
        for _, side in ipairs(sides) do
            local name, cmd, want = side[1], side[2], side[3]
            local r, err = run(cmd)
            if not r then
                fail(format("%s (%s) round %d: %s", def.id, name, round, err))
            else
                local bad = check_calls(r.calls, r.ops, want, def.occasional)
                if bad then
                    fail(format("%s (%s) round %d: round trips changed: %s", def.id, name, round, bad))
                end
                def.calls_text = def.calls_text or (name == "case" and calls_text(r.calls, r.ops)) or nil
                if name == "floor" then def.a[round], def.a_cpu[round] = r.ns, r.cpu
                else def.b[round], def.b_cpu[round] = r.ns, r.cpu end
                if name == "case" then def.metrics = def.metrics or {}; def.metrics[round] = r.metrics end
                raw[#raw + 1] = { round, def.id, name, r.ns, r.cpu or 0, r.ops }
            end
        end
        io.write(".")
        io.flush()
    end
end
io.write("\n\n")

-- paired ratios: floor time / case time of the same round (speed vs floor),
-- and case time / compared case's time of the same round
local function paired(num, den)
    local t = {}
    for round = 1, rounds do
        if num[round] and den[round] then t[#t + 1] = num[round] / den[round] end
    end
    return median(t)
end

local rows = {}
for _, def in ipairs(cases) do
    local row = { def = def, case_us = median(def.b) and median(def.b) / 1000,
        floor_us = median(def.a) and median(def.a) / 1000,
        case_cpu = median(def.b_cpu) and median(def.b_cpu) / 1000,
        floor_cpu = median(def.a_cpu) and median(def.a_cpu) / 1000 }
    if def.floor then row.speed = paired(def.a, def.b) end
    local t = def.target or {}
    local verdict = {}
    if t.speed_min and row.speed then
        verdict[#verdict + 1] = row.speed >= t.speed_min and "ok" or "BELOW TARGET"
        row.target = format("speed >= %.2f", t.speed_min)
    end
    if def.compare then
        local other = by_id[def.compare.id]
        if other then
            row.compare = paired(def.b, other.b)
            row.compare_text = format("%.2fx %s", row.compare or 0 / 0, other.id)
            if def.compare.max and row.compare then
                verdict[#verdict + 1] = row.compare <= def.compare.max and "ok" or "BELOW TARGET"
                row.target = (row.target and row.target .. ", " or "")
                    .. format("time <= %.2fx %s", def.compare.max, other.id)
            end
        else
            row.compare_text = def.compare.id .. " not run"
        end
    end
    row.verdict = #verdict > 0 and concat(verdict, ",") or "-"
    if row.verdict:find("BELOW", 1, true) and strict then fail(def.id .. ": below target") end
    rows[#rows + 1] = row
end

local function fmt(v, pattern) return v and format(pattern, v) or "-" end

local header = { "case", "rt/op", "floor", "us/op", "floor us/op", "speed vs floor", "target", "result",
    "client cpu us/op" }
local lines = {}
for _, row in ipairs(rows) do
    local def = row.def
    lines[#lines + 1] = { def.title, tostring(def.round_trips or "?"),
        def.floor and (def.floor .. (def.servers and def.servers > 1 and (" x" .. def.servers) or "")) or "-",
        fmt(row.case_us, "%.1f"), fmt(row.floor_us, "%.1f"), fmt(row.speed, "%.3f"),
        row.target or "-", row.verdict,
        fmt(row.case_cpu, "%.1f") .. " vs " .. fmt(row.floor_cpu, "%.1f") }
end
local widths = {}
for i, h in ipairs(header) do
    widths[i] = #h
    for _, l in ipairs(lines) do widths[i] = math.max(widths[i], #l[i]) end
end
local function print_row(l)
    local cells = {}
    for i, v in ipairs(l) do
        cells[i] = i == 1 and v .. string.rep(" ", widths[i] - #v) or string.rep(" ", widths[i] - #v) .. v
    end
    print(concat(cells, "  "))
end
print_row(header)
for _, l in ipairs(lines) do print_row(l) end
print()
print("medians of " .. rounds .. " rounds; speed vs floor = median over rounds of (floor time / case time)")
print("in the same round; the floor is bench/floor.c doing the same round trips in plain hiredis.")
print("client cpu: the case's process CPU time per op vs the floor's (os.clock / clock(3)).")
for _, row in ipairs(rows) do
    local def = row.def
    local extra = {}
    if row.compare_text then extra[#extra + 1] = "time " .. row.compare_text end
    if def.metrics then
        local names = {}
        for _, m in pairs(def.metrics) do for name in pairs(m) do names[name] = true end end
        for name in pairs(names) do
            local vals = {}
            for _, m in pairs(def.metrics) do if tonumber(m[name]) then vals[#vals + 1] = m[name] end end
            if #vals > 0 then extra[#extra + 1] = format("%s %g", name, median(vals)) end
        end
        table.sort(extra)
    end
    print(format("  %-13s commands/op: %s%s", def.id, def.calls_text or "?",
        #extra > 0 and ("; " .. concat(extra, ", ")) or ""))
end

-- CSV and chart
assert(os.execute("mkdir -p " .. helper.quote(out_dir)))
local f = assert(io.open(out_dir .. "/runs.csv", "w"))
f:write("round,case,side,ns_per_op,cpu_ns_per_op,ops\n")
for _, r in ipairs(raw) do f:write(format("%d,%s,%s,%.1f,%.1f,%d\n", r[1], r[2], r[3], r[4], r[5], r[6])) end
f:close()
f = assert(io.open(out_dir .. "/summary.csv", "w"))
f:write("case,title,round_trips,case_us,floor_us,speed_vs_floor,target,result,"
    .. "case_cpu_us,floor_cpu_us,started\n")
for _, row in ipairs(rows) do
    local def = row.def
    f:write(format("%s,\"%s\",%s,%s,%s,%s,\"%s\",%s,%s,%s,%s\n", def.id, def.title,
        tostring(def.round_trips or ""), fmt(row.case_us, "%.2f"), fmt(row.floor_us, "%.2f"),
        fmt(row.speed, "%.4f"), row.target or "", row.verdict, fmt(row.case_cpu, "%.2f"),
        fmt(row.floor_cpu, "%.2f"), os.date("!%Y-%m-%dT%H:%M:%SZ", started)))
end
f:close()
f = assert(io.open(out_dir .. "/chart.dat", "w"))
for _, row in ipairs(rows) do
    f:write(format("\"%s\" %s %s %s\n", row.def.id, fmt(row.floor_us, "%.2f"), fmt(row.case_us, "%.2f"),
        fmt(row.speed, "%.4f")))
end
f:close()
local plotted = false
local ymax = 1.2
for _, row in ipairs(rows) do if row.speed and row.speed * 1.1 > ymax then ymax = row.speed * 1.1 end end
if os.execute("command -v gnuplot >/dev/null 2>&1") then
    local gp = format([[
set terminal pngcairo size 1200,520 font ",10" noenhanced
set output "%s/chart.png"
set datafile missing "-"
set style fill solid 0.8 border -1
set xtics scale 0 rotate by -25
set multiplot layout 1,2 title "redlock vs the hiredis floor (%s, medians of %d rounds)"
set title "time per operation"
set ylabel "microseconds"
set style data histograms
set style histogram clustered gap 1
set boxwidth 0.9
set yrange [0:*]
set offsets 0, 0, graph 0.1, 0
set key top right
plot "%s/chart.dat" using 2:xtic(1) title "floor (C, hiredis)", "" using 3 title "case"
set title "speed vs floor (floor time / case time, paired by round)"
set ylabel "ratio"
set style histogram rowstacked
set boxwidth 0.6
set yrange [0:%.2f]
set offsets 0, 0, 0, 0
set arrow 1 from graph 0, first 0.95 to graph 1, first 0.95 nohead dashtype 2 lc rgb "red"
set label 1 "target 0.95" at graph 0.01, first 0.99 tc rgb "red"
plot "%s/chart.dat" using 4:xtic(1) notitle lc rgb "#3cb371"
unset multiplot
]], out_dir, unix and "unix socket" or "TCP loopback", rounds, out_dir, ymax, out_dir)
    local g = assert(io.open(out_dir .. "/chart.gp", "w"))
    g:write(gp)
    g:close()
    plotted = os.execute("gnuplot " .. helper.quote(out_dir .. "/chart.gp") .. " 2>&1")
end
print()
print(format("wrote %s/runs.csv, %s/summary.csv%s", out_dir, out_dir,
    plotted and (", " .. out_dir .. "/chart.png") or " (no chart: gnuplot missing or failed)"))

helper.stop_all()
if #failures > 0 then
    io.stderr:write(format("%d failure(s):\n  %s\n", #failures, concat(failures, "\n  ")))
    os.exit(1)
end
