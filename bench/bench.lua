-- The benchmark driver behind `make bench` (bench/run.sh sets the paths and
-- cleans up). For every case in bench/cases/*.lua it starts the servers the
-- case needs, then for each round and each regime runs the floor
-- (bench/floor, C) and the case (bench/case.lua, Lua) one after the other,
-- A B in odd rounds and B A in even ones. It checks every run's INFO
-- commandstats deltas against the case's declared commands per operation,
-- so a change in round trips fails the benchmark instead of only slowing
-- it, and prints medians and ratios to the floor measured in the same run:
-- time, the client's CPU, the server's CPU (/proc schedstat), the time
-- inside commands (INFO commandstats usec) and the lock cycles per second
-- one Redis core could serve. Writes runs.csv, summary.csv and chart.png
-- under the output directory.
--
-- Regimes (taskset; the machine has 2 cores or more):
--   split   the redis-servers on CPU 1, the measuring process on CPU 0
--   shared  both on CPU 0
-- The default, both, runs each in every round. Without taskset or with
-- one CPU: unpinned, with a note.
--
-- usage: lua bench/bench.lua [--rounds N] [--scale X] [--only id,id]
--                            [--regime split|shared|both|unpinned]
--                            [--unix] [--out DIR] [--strict]
-- Exits 1 when a run fails or its commands differ from the declared ones;
-- timing targets are reported, and fail the exit status only with --strict.
local helper = require "helper"
local report = dofile("bench/report.lua")

local FLOOR = os.getenv("REDLOCK_FLOOR") or "build/bench/floor"
local LUA = os.getenv("REDLOCK_LUA") or "lua5.4"
local BUILD = os.getenv("REDLOCK_BUILD") or "build"

local format, concat = string.format, table.concat

-- The default number of rounds. A round's ratio to the floor scatters with
-- a standard deviation of about 0.08 in the split regime here (0.02-0.2
-- shared, a few far-off rounds), so that the medians of 15 rounds still
-- moved by 0.035-0.10 from one block of rounds to the next; the median of
-- 31 holds to about +-0.02 (bench/README.md). 31 rounds of every case in
-- both regimes take about two minutes here.
local ROUNDS = 31

-- options
local rounds, scale, only, unix, out_dir, strict, regime_arg = ROUNDS, 1, nil, false, "bench/results",
    false, "both"
do
    local usage = "--rounds N --scale X --only id,id --regime split|shared|both|unpinned --unix --out DIR"
        .. " --strict"
    local i = 1
    while i <= #arg do
        local a = arg[i]
        if a == "--rounds" then rounds = assert(tonumber(arg[i + 1]), "--rounds N"); i = i + 1
        elseif a == "--scale" then scale = assert(tonumber(arg[i + 1]), "--scale X"); i = i + 1
        elseif a == "--only" then
            only = {}
            for id in (arg[i + 1] or ""):gmatch("[^,]+") do only[id] = true end
            i = i + 1
        elseif a == "--regime" then regime_arg = arg[i + 1]; i = i + 1
        elseif a == "--out" then out_dir = assert(arg[i + 1], "--out DIR"); i = i + 1
        elseif a == "--unix" then unix = true
        elseif a == "--strict" then strict = true
        else
            error("unknown argument " .. a .. " (" .. usage .. ")")
        end
        i = i + 1
    end
    local known = { split = true, shared = true, both = true, unpinned = true }
    assert(known[regime_arg], "--regime split|shared|both|unpinned (" .. usage .. ")")
end

-- os.execute's success: true (Lua 5.2+) or 0 (Lua 5.1, LuaJIT)
local function succeeds(cmd)
    local r = os.execute(cmd)
    return r == true or r == 0
end

-- Regimes: where the servers and the measuring process run.
local REGIMES = {
    split = { server_cpu = "1", client_cpu = "0", what = "redis-server on CPU 1, client on CPU 0" },
    shared = { server_cpu = "0", client_cpu = "0", what = "redis-server and client both on CPU 0" },
    unpinned = { what = "redis-server and client where the scheduler puts them" },
}
local regimes, regime_note
do
    local ncpu = tonumber((helper.read_cmd("getconf _NPROCESSORS_ONLN 2>/dev/null"):match("%d+"))) or 1
    local taskset = succeeds("command -v taskset >/dev/null 2>&1")
    REGIMES.unpinned.all_cpus = "0-" .. (ncpu - 1)
    if regime_arg == "unpinned" then
        regimes = { "unpinned" }
    elseif not taskset or ncpu < 2 then
        regimes = { "unpinned" }
        regime_note = format("note: %s: no split or shared regime, both sides unpinned (against the split"
            .. " regime's targets)", not taskset and "taskset is missing" or "one CPU")
    elseif regime_arg == "both" then
        regimes = { "split", "shared" }
    else
        regimes = { regime_arg }
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

-- The time inside commands, ns per op: the usec of the commands the client
-- sent. A script's usec already includes the commands it calls (which
-- count again under their own names), so when scripts ran only the
-- scripts count, and the commands in sent (those the client sent itself
-- besides); without scripts every command counts.
local SCRIPTS = { evalsha = true, eval = true, evalsha_ro = true, eval_ro = true, fcall = true,
    fcall_ro = true }
local function inside_ns(usec, calls, ops, sent)
    local scripted = false
    for name in pairs(calls) do if SCRIPTS[name] then scripted = true end end
    local extra = {}
    for _, name in ipairs(sent or {}) do extra[name] = true end
    local total = 0
    for name, us in pairs(usec) do
        if not scripted or SCRIPTS[name] or extra[name] then total = total + us end
    end
    return total * 1000 / ops
end

-- Runs one process; returns its parsed result line or nil, message.
local function run(cmd, sent)
    local p = assert(io.popen(cmd .. " 2>&1"))
    local output = p:read("*a")
    local ok = p:close()
    local line = output:match("(ns_per_op=[^\n]*)")
    if not ok or not line then return nil, (output:gsub("%s+$", "")) end
    local r = { ns = tonumber(line:match("ns_per_op=([%d.]+)")),
        cpu = tonumber(line:match("cpu_ns_per_op=([%d.]+)")),
        server = tonumber(line:match("server_ns_per_op=([%d.]+)")), ops = tonumber(line:match("ops=(%d+)")),
        calls = parse_calls(line:match("calls=(%S*)")), metrics = {} }
    r.inside = inside_ns(parse_calls(line:match("usec=(%S*)")), r.calls, r.ops, sent)
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
    local urls, addrs, pids = {}, {}, {}
    for i = 1, want do
        local s = pool[i]
        urls[i] = unix and ("unix://" .. s.socket) or s:url()
        addrs[i] = unix and s.socket or ("127.0.0.1:" .. s.port)
        pids[i] = s.pid
    end
    return urls, addrs, pids
end

local function shell_list(t)
    local q = {}
    for i, v in ipairs(t) do q[i] = helper.quote(v) end
    return concat(q, " ")
end

-- Pins every thread of the case's servers to the regime's CPU; returns the
-- prefix that pins a command to the regime's client CPU.
local function enter_regime(def, regime)
    local r = REGIMES[regime]
    local cpu = r.server_cpu or r.all_cpus
    for _, pid in ipairs(def.pids) do
        assert(succeeds(format("taskset -a -pc %s %s >/dev/null 2>&1", cpu, pid)) or not r.server_cpu,
            "taskset could not pin the server")
    end
    return r.client_cpu and format("taskset -c %s ", r.client_cpu) or ""
end

local failures = {}
local function fail(msg)
    failures[#failures + 1] = msg
    io.stderr:write("FAIL ", msg, "\n")
end

-- Target per regime: a number (every regime) or { split =, shared =,
-- unpinned = } (unpinned defaults to split's).
local function target_for(t, regime)
    if type(t) ~= "table" then return t end
    return t[regime] or (regime == "unpinned" and t.split) or nil
end

local SERIES = { "ns", "cpu", "server", "inside" }
for _, def in ipairs(cases) do
    def.urls, def.addrs, def.pids = servers_for(def)
    def.ops = math.max(1, math.floor((def.iterations or 1000) * scale))
    def.warmup = math.max(0, math.floor((def.warmup or 200) * scale))
    def.res = {}
    for _, regime in ipairs(regimes) do
        local res = { floor = {}, case = {}, metrics = {} }
        for _, side in ipairs { "floor", "case" } do
            for _, k in ipairs(SERIES) do res[side][k] = {} end
        end
        def.res[regime] = res
    end
end

local raw = {}
local started = os.time()
local clock0 = os.time()
io.write(format("redlock bench: %d case(s), %d rounds, regimes %s, %s, floor %s\n", #cases, rounds,
    concat(regimes, " and "), unix and "unix sockets" or "TCP 127.0.0.1", FLOOR))
for _, regime in ipairs(regimes) do io.write(format("  %-8s %s\n", regime, REGIMES[regime].what)) end
if regime_note then io.write(regime_note, "\n") end
for round = 1, rounds do
    -- the regimes in turn, in the other order every other round
    local order = {}
    for i, regime in ipairs(regimes) do order[round % 2 == 1 and i or #regimes + 1 - i] = regime end
    for _, regime in ipairs(order) do
        for _, def in ipairs(cases) do
            local res = def.res[regime]
            local pin = enter_regime(def, regime)
            local key = format("bench:%s:%s:%d:%d", def.id, regime, round, os.time())
            local function floor_cmd(mode, k)
                return format("%s%s -n %d -w %d -k %s %s %s", pin, FLOOR, def.ops, def.warmup,
                    helper.quote(k), mode, shell_list(def.addrs))
            end
            local sides = {}
            if def.floor then
                sides[#sides + 1] = { "floor", floor_cmd(def.floor, key .. ":a"),
                    def.floor_commands or def.commands, def.floor_sent }
            end
            if def.floor_b then
                sides[#sides + 1] = { "case", floor_cmd(def.floor_b, key .. ":b"), def.commands, def.sent }
            else
                sides[#sides + 1] = { "case", format(
                    "LUA_PATH=%s LUA_CPATH=%s %s%s bench/case.lua %s %s %d %d %s",
                    helper.quote("lua/?.lua;lua/?/init.lua;bench/?.lua;spec/?.lua;;"),
                    helper.quote(BUILD .. "/?.so;;"), pin, LUA, helper.quote(def.file),
                    helper.quote(key .. ":b"), def.ops, def.warmup, shell_list(def.urls)),
                    def.commands, def.sent }
            end
            -- A B in odd rounds, B A in even ones: a load that drifts during a
            -- round weighs on both sides alike
            if round % 2 == 0 then sides[1], sides[#sides] = sides[#sides], sides[1] end
            for _, side in ipairs(sides) do
                local name, cmd, want, sent = side[1], side[2], side[3], side[4]
                local r, err = run(cmd, sent)
                if not r then
                    fail(format("%s (%s, %s) round %d: %s", def.id, name, regime, round, err))
                else
                    local bad = check_calls(r.calls, r.ops, want, def.occasional)
                    if bad then
                        fail(format("%s (%s, %s) round %d: round trips changed: %s", def.id, name, regime,
                            round, bad))
                    end
                    def.calls_text = def.calls_text or (name == "case" and calls_text(r.calls, r.ops)) or nil
                    for _, k in ipairs(SERIES) do res[name][k][round] = r[k] end
                    if name == "case" then res.metrics[round] = r.metrics end
                    raw[#raw + 1] = { round, regime, def.id, name, r.ns, r.cpu or 0, r.server or -1, r.inside,
                        r.ops }
                end
            end
            io.write(".")
            io.flush()
        end
    end
end
local elapsed = os.time() - clock0
io.write("\n\n")

-- paired ratios: num time / den time of the same round (the floor's over
-- the case's: speed vs floor)
local function paired(num, den)
    local t = {}
    for round = 1, rounds do
        if num[round] and den[round] then t[#t + 1] = num[round] / den[round] end
    end
    return median(t)
end

-- median of series t in us (nil when empty)
local function med_us(t)
    local m = median(t)
    return m and m / 1000
end

local rows = {}
for _, def in ipairs(cases) do
    for _, regime in ipairs(regimes) do
        local res = def.res[regime]
        local row = { def = def, regime = regime, res = res }
        for _, k in ipairs(SERIES) do
            row["case_" .. k], row["floor_" .. k] = med_us(res.case[k]), med_us(res.floor[k])
        end
        if def.floor then
            row.speed = paired(res.floor.ns, res.case.ns)
            row.server_ratio = paired(res.case.server, res.floor.server)
            row.inside_ratio = paired(res.case.inside, res.floor.inside)
        end
        local t = def.target or {}
        local targets, verdict = {}, {}
        local speed_min = target_for(t.speed_min, regime)
        if speed_min and row.speed then
            verdict[#verdict + 1] = row.speed >= speed_min and "ok" or "BELOW TARGET"
            targets[#targets + 1] = format("speed >= %.2f", speed_min)
            report.target(format("%s, %s: speed against %s", def.title, regime,
                def.floor == "textbook" and "the textbook lock" or "its C floor"), format("%.2f", row.speed),
                format(">= %.2f", speed_min), row.speed >= speed_min, def.headline)
        end
        local inside_max = target_for(t.inside_max, regime)
        if inside_max and row.inside_ratio then
            verdict[#verdict + 1] = row.inside_ratio <= inside_max and "ok" or "BELOW TARGET"
            targets[#targets + 1] = format("in commands <= %.2fx", inside_max)
            report.target(format("%s, %s: time inside commands", def.title, regime),
                format("%.2fx", row.inside_ratio), format("<= %.2fx", inside_max),
                row.inside_ratio <= inside_max, def.headline and regime ~= "shared")
        end
        if def.compare then
            local other = by_id[def.compare.id]
            if other then
                local ores = other.res[regime]
                if def.compare.speed_min then
                    -- the other case's time / this one's: this one's speed vs the other
                    row.compare = paired(ores.case.ns, res.case.ns)
                    row.compare_text = format("%s's time / this time %.3f", other.id, row.compare or 0 / 0)
                    if row.compare then
                        local ok = row.compare >= def.compare.speed_min
                        verdict[#verdict + 1] = ok and "ok" or "BELOW TARGET"
                        targets[#targets + 1] = format("%s/time >= %.2f", other.id, def.compare.speed_min)
                        report.target(format("%s, %s: %s's time / this", def.title, regime, other.id),
                            format("%.2f", row.compare), format(">= %.2f", def.compare.speed_min), ok)
                    end
                else
                    row.compare = paired(res.case.ns, ores.case.ns)
                    row.compare_text = format("time %.2fx %s", row.compare or 0 / 0, other.id)
                    if def.compare.max and row.compare then
                        verdict[#verdict + 1] = row.compare <= def.compare.max and "ok" or "BELOW TARGET"
                        targets[#targets + 1] = format("time <= %.2fx %s", def.compare.max, other.id)
                        report.target(format("%s, %s: time against %s's", def.title, regime, other.id),
                            format("%.2fx", row.compare), format("<= %.2fx", def.compare.max),
                            row.compare <= def.compare.max)
                    end
                end
            else
                row.compare_text = def.compare.id .. " not run"
            end
        end
        row.target = #targets > 0 and concat(targets, ", ") or "-"
        row.verdict = #verdict > 0 and concat(verdict, ",") or "-"
        if row.verdict:find("BELOW", 1, true) and strict then
            fail(def.id .. " (" .. regime .. "): below target")
        end
        rows[#rows + 1] = row
    end
end

local function fmt(v, pattern) return v and format(pattern, v) or "-" end

local function print_table(header, lines)
    local widths = {}
    for i, h in ipairs(header) do
        widths[i] = #h
        for _, l in ipairs(lines) do widths[i] = math.max(widths[i], #l[i]) end
    end
    local function print_row(l)
        local cells = {}
        for i, v in ipairs(l) do
            cells[i] = i <= 2 and v .. string.rep(" ", widths[i] - #v) or string.rep(" ", widths[i] - #v) .. v
        end
        print(concat(cells, "  "))
    end
    print_row(header)
    for _, l in ipairs(lines) do print_row(l) end
end

-- 1. time against the floor
do
    local lines = {}
    for _, row in ipairs(rows) do
        local def = row.def
        lines[#lines + 1] = { def.title, row.regime, tostring(def.round_trips or "?"),
            def.floor and (def.floor .. ((def.servers or 1) > 1 and (" x" .. def.servers) or "")) or "-",
            fmt(row.case_ns, "%.1f"), fmt(row.floor_ns, "%.1f"), fmt(row.speed, "%.3f"),
            row.target, row.verdict }
    end
    print_table({ "case", "regime", "rt/op", "floor", "us/op", "floor us/op", "speed vs floor", "target",
        "result" }, lines)
end
print()
print(format("medians of %d rounds%s (%d s).", rounds,
    rounds == ROUNDS and ", the default (medians of fewer moved by up to 0.1 here: bench/README.md)" or "",
    elapsed))
print("speed vs floor = median over rounds of (floor time / case time) in the same round and regime;")
print("the floor is bench/floor.c doing the same round trips in plain hiredis.")
for _, row in ipairs(rows) do
    local def = row.def
    local extra = {}
    if row.compare_text then extra[#extra + 1] = row.compare_text end
    local names = {}
    for _, m in pairs(row.res.metrics) do for name in pairs(m) do names[name] = true end end
    for name in pairs(names) do
        local vals = {}
        for _, m in pairs(row.res.metrics) do if tonumber(m[name]) then vals[#vals + 1] = m[name] end end
        if #vals > 0 then extra[#extra + 1] = format("%s %g", name, median(vals)) end
    end
    table.sort(extra)
    if row.regime == regimes[1] then
        print(format("  %-13s commands/op: %s", def.id, def.calls_text or "?"))
    end
    if #extra > 0 then print(format("  %-13s %s: %s", def.id, row.regime, concat(extra, ", "))) end
end
print()

-- 2. what each side costs: client CPU, server CPU, time inside commands
do
    local lines = {}
    for _, row in ipairs(rows) do
        local def = row.def
        local function vs(a, b) return fmt(a, "%.1f") .. " / " .. fmt(b, "%.1f") end
        local function per_core(us) return us and us > 0 and format("%.0f", 1e6 / us) or "-" end
        -- the case's extra time over the floor, and how much of it is extra
        -- CPU in the client and in the server
        local gap = "-"
        if row.case_ns and row.floor_ns then
            gap = format("%+.1f = %+.1f %+.1f", row.case_ns - row.floor_ns,
                (row.case_cpu or 0) - (row.floor_cpu or 0), (row.case_server or 0) - (row.floor_server or 0))
        end
        lines[#lines + 1] = { def.id, row.regime, vs(row.case_cpu, row.floor_cpu),
            vs(row.case_server, row.floor_server), fmt(row.server_ratio, "%.2f"),
            vs(row.case_inside, row.floor_inside), fmt(row.inside_ratio, "%.2f"),
            per_core(row.case_server) .. " / " .. per_core(row.floor_server), gap }
    end
    print_table({ "case", "regime", "client cpu us/op", "server cpu us/op", "ratio", "in commands us/op",
        "ratio", "ops/s per Redis core", "gap us: time = client + server" }, lines)
end
print()
print("each cell case / floor, medians (ratios: median over rounds of case / floor, same round).")
print("client cpu: the measuring process's CPU time (os.clock / clock(3)); server cpu: the redis-server's")
print("threads' CPU time from /proc/<pid>/task/*/schedstat, read before and after the timed loop; in")
print("commands: INFO commandstats usec of the commands sent (a script's includes what it calls), which")
print("leaves out reading, parsing and writing: the rest of server cpu. ops/s per Redis core = 1e6 / server")
print("cpu us/op: lock cycles per second one Redis core could serve at that cost. gap: case minus floor,")
print("time per op against the extra client and server CPU (what is left is waiting: wake-ups, scheduling).")

-- the report's table: a case's two regimes in one row
do
    local cols = { "case" }
    for _, regime in ipairs(regimes) do
        cols[#cols + 1] = "speed " .. regime
        cols[#cols + 1] = "in commands " .. regime
        cols[#cols + 1] = "server CPU " .. regime
    end
    cols[#cols + 1] = "us/op (floor) " .. regimes[1]
    cols[#cols + 1] = "targets"
    report.table("bench", format("Uncontended operations against their C floor, medians of %d rounds; speed ="
        .. " floor time / case time, in commands and server CPU = case / floor", rounds), cols)
    local by_def = {}
    for _, row in ipairs(rows) do
        by_def[row.def] = by_def[row.def] or {}
        by_def[row.def][row.regime] = row
    end
    for _, def in ipairs(cases) do
        local cells = { def.title .. (def.floor and (" (floor: " .. def.floor .. ")") or "") }
        for _, regime in ipairs(regimes) do
            local row = by_def[def][regime]
            cells[#cells + 1] = fmt(row.speed, "%.2f")
            cells[#cells + 1] = fmt(row.inside_ratio, "%.2fx")
            cells[#cells + 1] = fmt(row.server_ratio, "%.2fx")
        end
        local first = by_def[def][regimes[1]]
        cells[#cells + 1] = fmt(first.case_ns, "%.1f") .. " (" .. fmt(first.floor_ns, "%.1f") .. ")"
        local verdicts = {}
        for _, regime in ipairs(regimes) do
            local v = by_def[def][regime].verdict
            if v ~= "-" then
                verdicts[#verdicts + 1] = regime .. (v:find("BELOW", 1, true) and " NOT met" or " met")
            end
        end
        cells[#cells + 1] = #verdicts > 0 and concat(verdicts, ", ") or "-"
        report.row("bench", cells)
    end
end

-- CSV and chart
assert(succeeds("mkdir -p " .. helper.quote(out_dir)), "could not make " .. out_dir)
local f = assert(io.open(out_dir .. "/runs.csv", "w"))
f:write("round,regime,case,side,ns_per_op,cpu_ns_per_op,server_ns_per_op,inside_ns_per_op,ops\n")
for _, r in ipairs(raw) do
    f:write(format("%d,%s,%s,%s,%.1f,%.1f,%.1f,%.1f,%d\n", r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8],
        r[9]))
end
f:close()
f = assert(io.open(out_dir .. "/summary.csv", "w"))
f:write("case,regime,title,round_trips,case_us,floor_us,speed_vs_floor,target,result,"
    .. "case_cpu_us,floor_cpu_us,case_server_us,floor_server_us,server_ratio,case_inside_us,floor_inside_us,"
    .. "inside_ratio,rounds,started\n")
for _, row in ipairs(rows) do
    local def = row.def
    f:write(format("%s,%s,\"%s\",%s,%s,%s,%s,\"%s\",%s,%s,%s,%s,%s,%s,%s,%s,%s,%d,%s\n", def.id, row.regime,
        def.title, tostring(def.round_trips or ""), fmt(row.case_ns, "%.2f"), fmt(row.floor_ns, "%.2f"),
        fmt(row.speed, "%.4f"), row.target, row.verdict, fmt(row.case_cpu, "%.2f"),
        fmt(row.floor_cpu, "%.2f"), fmt(row.case_server, "%.2f"), fmt(row.floor_server, "%.2f"),
        fmt(row.server_ratio, "%.4f"), fmt(row.case_inside, "%.2f"), fmt(row.floor_inside, "%.2f"),
        fmt(row.inside_ratio, "%.4f"), rounds, os.date("!%Y-%m-%dT%H:%M:%SZ", started)))
end
f:close()
f = assert(io.open(out_dir .. "/chart.dat", "w"))
for _, row in ipairs(rows) do
    f:write(format("\"%s %s\" %s %s %s\n", row.def.id, row.regime, fmt(row.floor_ns, "%.2f"),
        fmt(row.case_ns, "%.2f"), fmt(row.speed, "%.4f")))
end
f:close()
local plotted = false
local ymax = 1.2
for _, row in ipairs(rows) do if row.speed and row.speed * 1.1 > ymax then ymax = row.speed * 1.1 end end
if succeeds("command -v gnuplot >/dev/null 2>&1") then
    local gp = format([[
set terminal pngcairo size 1400,560 font ",10" noenhanced
set output "%s/chart.png"
set datafile missing "-"
set style fill solid 0.8 border -1
set xtics scale 0 rotate by -30
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
set label 1 "split target 0.95" at graph 0.01, first 0.99 tc rgb "red"
set arrow 2 from graph 0, first 0.90 to graph 1, first 0.90 nohead dashtype 3 lc rgb "orange"
set label 2 "shared target 0.90" at graph 0.01, first 0.86 tc rgb "orange"
plot "%s/chart.dat" using 4:xtic(1) notitle lc rgb "#3cb371"
unset multiplot
]], out_dir, unix and "unix socket" or "TCP loopback", rounds, out_dir, ymax, out_dir)
    local g = assert(io.open(out_dir .. "/chart.gp", "w"))
    g:write(gp)
    g:close()
    plotted = succeeds("gnuplot " .. helper.quote(out_dir .. "/chart.gp") .. " 2>&1")
end
print()
print(format("wrote %s/runs.csv, %s/summary.csv%s", out_dir, out_dir,
    plotted and (", " .. out_dir .. "/chart.png") or " (no chart: gnuplot missing or failed)"))

helper.stop_all()
if #failures > 0 then
    io.stderr:write(format("%d failure(s):\n  %s\n", #failures, concat(failures, "\n  ")))
    os.exit(1)
end
