-- The contended case, against the C 1 ms-retry loop: P processes (default
-- 4) on K keys (default 1; process i on key i mod K), each N times
-- (default 2000) lock / GET / SET+1 / unlock, against a redis-server of
-- its own, in ONE run, rounds alternating the sides (BENCH_ROUNDS, default
-- 3; medians over the rounds):
--   C 1 ms-retry loop      bench/contended_floor.c: SET NX PX, on refusal
--                          sleep 1 ms and retry; compare-and-delete release
--                          (BENCH_MASTERS=3: over 3 masters, held on a
--                          majority; redlock then is a Redlock over them,
--                          and notify=false is how its waiters polled
--                          before issue 48)
--   redlock default        notified waiting, fair = false: a release hands
--                          the lock to a waiter only past the bound
--                          (redlock.notify.BARGE_MS), else wakes it to compete
--   redlock fair=true      notified waiting, every release hands over
--   redlock notify=false   polling with the default retry_delay (BENCH_POLL=1)
-- Per side: acquisitions/s and the ratio to the C loop (per round, the
-- median of the rounds' ratios), the wait for the lock (p50/p99/max), owner
-- changes (count, % of acquisitions), the share of acquisitions a release
-- handed (the acquired event's `handed`), lost updates (must be 0), and
-- the hand-off gap p50: for each owner change, the new owner's acquire
-- time (the acquire returned) minus the previous owner's release time
-- (just before its release was sent), both CLOCK_MONOTONIC ms
-- (core.now()), and the servers' commands per acquisition (INFO
-- commandstats, the work that the machine's load does not change).
-- Then one line per target of issue 48, "met" or "NOT met", for redlock
-- default. Exits 0 whatever the figures, 1 on a lost update or a worker's
-- failure.
-- BENCH_EXP: a comma-separated list of environment settings, each one more
-- side of redlock default run with it (the knobs of redlock.notify:
-- BENCH_BARGE_MS, BENCH_WOKEN_RTTS, BENCH_WOKEN_MS), e.g.
-- BENCH_EXP="BENCH_BARGE_MS=2,BENCH_BARGE_MS=3" to tune the bound.
-- Each round's line also says, per side, the hold p50 (acquired to release
-- sent), the owner change's gap p50 and the retake's (the same process
-- taking the lock again: its release sent to its next acquire's return).
-- Pinning (BENCH_PIN): split (default: the redis-server on CPU 1, every
-- client process on CPU 0), shared (everything on CPU 0), none; without
-- taskset or with one CPU, unpinned (and it says so).
--
--   make bench-contended    (BENCH_N=2000 BENCH_P=4 BENCH_KEYS=1 BENCH_MASTERS=1 BENCH_ROUNDS=3
--                            BENCH_POLL=1 BENCH_PIN=split)
--   lua bench/contended.lua (with LUA_PATH/LUA_CPATH/BENCH_BIN as the Makefile sets)
-- At the defaults each side's run takes 1-2 s here (plus 0.9 s for the
-- workers to start), the whole run 20-35 s (BENCH_POLL=1: a quarter more).
local redlock = require "redlock"
local core = require "redlock.core"
local report = dofile("bench/report.lua")

local now, sleep = core.now, core.sleep
local format = string.format

-- worker URL KEY COUNTER N START_AT OUT POLICY (notify, fair or poll)
-- Writes OUT: "<start> <end>", then per acquisition "<wait> <counter read>
-- <acquired at> <release sent at> <handed: 1 or 0>"
-- (bench/contended_floor.c writes the same less the last column).
local function worker(urls, key, counter, n, start_at, out, policy)
    local list = {}
    for u in urls:gmatch("[^,]+") do list[#list + 1] = u end
    local url = list[1] -- (the counter's)
    if os.getenv("BENCH_WOKEN_RTTS") then
        require("redlock.notify").WOKEN_RTTS = tonumber(os.getenv("BENCH_WOKEN_RTTS"))
    end
    if os.getenv("BENCH_WOKEN_MS") then
        require("redlock.notify").WOKEN_MS = tonumber(os.getenv("BENCH_WOKEN_MS"))
    end
    if os.getenv("BENCH_BARGE_MS") then require("redlock.notify").BARGE_MS = os.getenv("BENCH_BARGE_MS") end
    -- (over several masters: a reply within 500 ms, as a loaded host needs)
    local client = redlock.new { servers = list, server_timeout = #list > 1 and 500 or nil }
    local data = core.conn { host = url:match("//([^:/]+)"), port = tonumber(url:match(":(%d+)$")) }
    assert(data:command("PING"))
    local warm = assert(client:acquire(key .. ":warm")) -- connects before the start
    assert(warm:release())
    local handed = false
    local opts = { wait = 60000, notify = policy ~= "poll", fair = policy == "fair",
        on_event = function(ev) if ev.type == "acquired" then handed = ev.handed or false end end }
    local waits, seqs, acquired, released, by = {}, {}, {}, {}, {}
    sleep(start_at - now())
    local t_start = now()
    for i = 1, n do
        local t0 = now()
        local lock = assert(client:acquire(key, opts))
        local t1 = now()
        local v = tonumber(data:command("GET", counter)) or 0
        assert(data:command("SET", counter, v + 1))
        local t2 = now()
        assert(lock:release())
        waits[i], seqs[i], acquired[i], released[i], by[i] = t1 - t0, v, t1, t2, handed and 1 or 0
    end
    local t_end = now()
    local f = assert(io.open(out, "w"))
    f:write(format("%.3f %.3f\n", t_start, t_end))
    for i = 1, n do
        f:write(format("%.4f %d %.4f %.4f %d\n", waits[i], seqs[i], acquired[i], released[i], by[i]))
    end
    f:close()
    client:close()
    data:close()
end

if arg[1] == "worker" then
    worker(arg[2], arg[3], arg[4], tonumber(arg[5]), tonumber(arg[6]), arg[7], arg[8])
    os.exit(0)
end

-- The driver -------------------------------------------------------------
local helper = require "helper"

local LUA = arg[-1] or "lua5.4"
local function env(name, default) return tonumber(os.getenv(name)) or default end
local N, P, ROUNDS = env("BENCH_N", 2000), env("BENCH_P", 4), env("BENCH_ROUNDS", 3)
local KEYS = env("BENCH_KEYS", 1)
local MASTERS = env("BENCH_MASTERS", 1)
local POLL = os.getenv("BENCH_POLL") == "1"
local PIN = os.getenv("BENCH_PIN") or "split"
local FLOOR = (os.getenv("BENCH_BIN") or "build/bench") .. "/contended_floor"
local median = helper.median

local function percentile(sorted, p)
    return sorted[math.max(1, math.ceil(p * #sorted))]
end

local SIDES = {
    { id = "c", name = "C 1 ms-retry loop" },
    { id = "notify", name = "redlock default (fair=false)", policy = "notify" },
    { id = "fair", name = "redlock fair=true", policy = "fair" },
}
if POLL then SIDES[#SIDES + 1] = { id = "poll", name = "redlock notify=false", policy = "poll" } end
for v in (os.getenv("BENCH_EXP") or ""):gmatch("[^,]+") do
    SIDES[#SIDES + 1] = { id = "x" .. #SIDES, name = v, policy = "notify", env = v .. " " }
end

-- Reads a worker's file (cols: 4 for the C loop, 5 with the handed column):
-- start, end, rows; nil and a reason when it is not whole.
local function read_out(out, n, cols)
    local f = io.open(out)
    if not f then return nil, "no output" end
    local t0, t1 = f:read("*n", "*n")
    local rows = {}
    for i = 1, n do
        local w, seq, acq, rel = f:read("*n", "*n", "*n", "*n")
        local by = cols == 5 and f:read("*n") or 0
        if not (rel and by) then
            f:close()
            return nil, format("output cut at acquisition %d", i)
        end
        rows[i] = { w, seq, acq, rel, by }
    end
    f:close()
    return t0, t1, rows
end

-- The commands the servers have run so far (INFO commandstats).
local function commands(server)
    local n = 0
    for _, s in ipairs(server) do
        for calls in s:cli("INFO", "commandstats"):gmatch("calls=(%d+)") do n = n + tonumber(calls) end
    end
    return n
end

-- One run of p workers of one side at once; returns its measurements.
local function run(server, side, round)
    local keys, counters = {}, {}
    for k = 1, KEYS do
        keys[k] = format("bench:contended:%s:%d:%d", side.id, round, k)
        counters[k] = keys[k] .. ":counter"
    end
    local start_at = now() + 500 + 100 * P
    local dir = helper.fresh_dir("bench-" .. side.id)
    local cmds0 = commands(server)
    local procs, outs = {}, {}
    for i = 1, P do
        outs[i] = format("%s/w%d", dir, i)
        local k = (i - 1) % KEYS + 1
        local cmd
        local addrs, urls = {}, {}
        for j, s in ipairs(server) do addrs[j], urls[j] = "127.0.0.1:" .. s.port, s:url() end
        if side.id == "c" then
            cmd = format("%s %s %s %s %d %.3f %s 2>&1", helper.quote(FLOOR), table.concat(addrs, ","),
                keys[k], counters[k], N, start_at, outs[i])
        else
            cmd = format("%s%s %s worker %s %s %s %d %.3f %s %s 2>&1", side.env or "", helper.quote(LUA),
                helper.quote(arg[0]), table.concat(urls, ","), keys[k], counters[k], N, start_at, outs[i],
                side.policy)
        end
        procs[i] = assert(io.popen(cmd))
    end
    local failed = {}
    for i = 1, P do
        local msg = procs[i]:read("*a")
        local ok = procs[i]:close() -- (always true on Lua 5.1: the output's check below)
        if not ok then failed[#failed + 1] = format("worker %d: %s", i, (msg:gsub("%s+$", ""))) end
    end
    if #failed > 0 then error(side.name .. ": " .. table.concat(failed, "; ")) end
    -- (the workers' warm-up and connections: a few per worker)
    local cmds = commands(server) - cmds0
    local waits, by_seq, late, handed = {}, {}, 0, 0
    for k = 1, KEYS do by_seq[k] = {} end
    local t_first, t_last = math.huge, -math.huge
    local dup = 0
    for i = 1, P do
        local t0, t1, rows = read_out(outs[i], N, side.id == "c" and 4 or 5)
        if not t0 then error(format("%s: worker %d: %s", side.name, i, t1)) end
        t_first, t_last = math.min(t_first, t0), math.max(t_last, t1)
        late = math.max(late, t0 - start_at)
        local seqs = by_seq[(i - 1) % KEYS + 1]
        for _, r in ipairs(rows) do
            waits[#waits + 1] = r[1]
            if seqs[r[2]] then dup = dup + 1 end
            seqs[r[2]] = { owner = i, acq = r[3], rel = r[4] }
            handed = handed + r[5]
        end
    end
    table.sort(waits)
    local changes, gaps, lost, retakes, holds = 0, {}, dup, {}, {}
    for k = 1, KEYS do
        local seqs = by_seq[k]
        for seq = 1, P * N - 1 do
            local cur, prev = seqs[seq], seqs[seq - 1]
            if cur and prev and cur.owner ~= prev.owner then
                changes = changes + 1
                gaps[#gaps + 1] = cur.acq - prev.rel
            elseif cur and prev then
                retakes[#retakes + 1] = cur.acq - prev.rel
            end
            if cur then holds[#holds + 1] = cur.rel - cur.acq end
        end
        local expected = 0
        for i = 1, P do if (i - 1) % KEYS + 1 == k then expected = expected + N end end
        lost = math.max(lost, expected - (tonumber(server[1]:cli("GET", counters[k])) or 0))
    end
    table.sort(gaps)
    table.sort(retakes)
    table.sort(holds)
    return {
        retake = retakes[1] and percentile(retakes, 0.50), hold = percentile(holds, 0.50),
        cmds = cmds / (P * N),
        rate = P * N / ((t_last - t_first) / 1000),
        p50 = percentile(waits, 0.50), p99 = percentile(waits, 0.99), max = waits[#waits],
        changes = changes, handed = handed, gap = gaps[1] and percentile(gaps, 0.50),
        lost = lost, late = late,
    }
end

-- Pinning: returns a line saying what it did.
local function pin(server)
    local missing = helper.pin_missing()
    if PIN == "none" then return "unpinned (BENCH_PIN=none)" end
    if missing then return "unpinned: " .. missing end
    local server_cpu = PIN == "shared" and 0 or 1
    -- the clients inherit this process's CPU
    local pinned = helper.pin(nil, 0)
    for _, s in ipairs(server) do pinned = pinned and helper.pin(s.pid, server_cpu) end
    if not pinned then
        for _, s in ipairs(server) do helper.pin(s.pid, "0-1023") end -- back to any CPU
        helper.pin(nil, "0-1023")
        return "unpinned: taskset could not pin to CPUs 0 and 1"
    end
    if PIN == "shared" then return "shared (redis-server and the clients on CPU 0)" end
    return "split (redis-server on CPU 1, the clients on CPU 0)"
end

-- The 1-minute load average (/proc/loadavg), or "?": the machine is shared.
local function load_avg()
    local f = io.open("/proc/loadavg")
    local v = f and f:read("*n")
    if f then f:close() end
    return v and format("%.2f", v) or "?"
end

local function fmt(v, f) return v and format(f, v) or "-" end

local results = {} -- results[side.id][round]
local failure
local ok, err = pcall(function()
    if PIN ~= "split" and PIN ~= "shared" and PIN ~= "none" then
        error("BENCH_PIN: split, shared or none, not " .. PIN)
    end
    local f = io.open(FLOOR)
    if not f then error(FLOOR .. " missing (make " .. FLOOR .. ")") end
    f:close()
    local server = {}
    for j = 1, MASTERS do server[j] = helper.start_server() end
    print(format("contended: %d processes x %d acquisitions of lock / GET / SET+1 / unlock, %s, %s,"
        .. " %d rounds (%s, load %s)", P, N, KEYS == 1 and "one key" or KEYS .. " keys",
        MASTERS == 1 and "one server" or MASTERS .. " masters (Redlock)", ROUNDS, _VERSION, load_avg()))
    print("pinning: " .. pin(server))
    for _, side in ipairs(SIDES) do results[side.id] = {} end
    for round = 1, ROUNDS do
        local line = {}
        for k = 1, #SIDES do
            -- alternate the order: a shared machine's load drifts
            local side = SIDES[round % 2 == 1 and k or #SIDES + 1 - k]
            local r = run(server, side, round)
            results[side.id][round] = r
            if r.lost > 0 then failure = format("%s: %d lost updates", side.name, r.lost) end
            if r.late > 50 then
                print(format("  (round %d, %s: a worker started %.0f ms late)", round, side.name, r.late))
            end
        end
        for _, side in ipairs(SIDES) do
            local r = results[side.id][round]
            line[#line + 1] = format("%s %.0f/s p99 %.2f max %.1f (hold %.3f, gap %.3f, retake %s)", side.id,
                r.rate, r.p99, r.max, r.hold, r.gap or -1, fmt(r.retake, "%.3f"))
        end
        print(format("round %d: %s", round, table.concat(line, ", ")))
    end
end)

local function collect(id, field)
    local t = {}
    for round, r in ipairs(results[id] or {}) do
        local v = field == "ratio" and r.rate / results.c[round].rate or r[field]
        if v then t[#t + 1] = v end
    end
    return #t > 0 and median(t) or nil
end

if ok then
    local total = P * N
    print(format("medians over %d rounds:", ROUNDS))
    print(format("  %-28s %8s %9s %9s %8s %8s %16s %7s %10s %8s %5s", "", "acq/s", "vs C loop", "wait p50",
        "p99", "max", "owner changes", "handed", "gap p50", "cmds/acq", "lost"))
    report.table("contended", format("Contended: %d processes x %d lock / GET / SET+1 / unlock on %s, %s,"
        .. " pinning %s, medians of %d rounds", P, N, KEYS == 1 and "one key" or KEYS .. " keys",
        MASTERS == 1 and "one server" or MASTERS .. " masters", PIN, ROUNDS), { "", "acq/s", "vs C loop",
        "wait p50", "p99", "max", "owner changes", "handed" })
    for _, side in ipairs(SIDES) do
        local ch = collect(side.id, "changes")
        local worst = 0
        for _, r in ipairs(results[side.id]) do worst = math.max(worst, r.lost) end
        print(format("  %-28s %8.0f %8.2fx %6.2f ms %5.2f ms %5.1f ms %6d (%5.1f%%) %6.1f%% %7s ms %8.2f %5d",
            side.name, collect(side.id, "rate"), collect(side.id, "ratio"), collect(side.id, "p50"),
            collect(side.id, "p99"), collect(side.id, "max"), ch, 100 * ch / total,
            100 * collect(side.id, "handed") / total, fmt(collect(side.id, "gap"), "%.2f"),
            collect(side.id, "cmds"), worst))
        report.row("contended", { side.name, format("%.0f", collect(side.id, "rate")),
            format("%.2fx", collect(side.id, "ratio")), format("%.2f ms", collect(side.id, "p50")),
            format("%.2f ms", collect(side.id, "p99")), format("%.1f ms", collect(side.id, "max")),
            format("%.1f%%", 100 * ch / total), format("%.1f%%", 100 * collect(side.id, "handed") / total) })
    end
    local ratio = collect("notify", "ratio")
    local p99, max = collect("notify", "p99"), collect("notify", "max")
    local function target(what, limit, value, met, headline)
        print(format("  %-38s %-9s %s", what .. " " .. limit .. ":", value, met and "met" or "NOT met"))
        report.target("contended, redlock default: " .. what, value, limit, met, headline)
    end
    print("targets (issue 48), redlock default, medians:")
    target("acquisitions/s", ">= 1.0x the C loop", format("%.2fx", ratio), ratio >= 1.0, true)
    target("wait p99", "<= 5 ms", format("%.2f ms", p99), p99 <= 5, true)
    target("wait max", "<= 20 ms", format("%.1f ms", max), max <= 20)
end
helper.stop_all()
if not os.getenv("REDLOCK_TEST_TMP") then os.execute("rm -rf " .. helper.quote(helper.root())) end
if not ok then
    io.stderr:write(tostring(err), "\n")
    os.exit(1)
end
if failure then
    io.stderr:write("contended: ", failure, "\n")
    os.exit(1)
end
