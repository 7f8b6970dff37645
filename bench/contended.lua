-- The contended case, against the C 1 ms-retry loop: P processes (default
-- 4) on one key, each N times (default 2000) lock / GET / SET+1 / unlock,
-- against a redis-server of its own, in ONE run, rounds alternating the
-- sides (BENCH_ROUNDS, default 3; medians over the rounds):
--   C 1 ms-retry loop      bench/contended_floor.c: SET NX PX, on refusal
--                          sleep 1 ms and retry; compare-and-delete release
--   redlock default        notified waiting
--   redlock notify=false   polling with the default retry_delay (BENCH_POLL=1)
-- Per side: acquisitions/s and the ratio to the C loop (per round, the
-- median of the rounds' ratios), the wait for the lock (p50/p99/max), owner
-- changes (count, % of acquisitions), lost updates (must be 0), and the
-- hand-off gap p50: for each owner change, the new owner's acquire time
-- (the acquire returned) minus the previous owner's release time (just
-- before its release was sent), both CLOCK_MONOTONIC ms (core.now()).
-- Then one line per target of issue 26, "met" or "NOT met", for redlock
-- default. Exits 0 whatever the figures, 1 on a lost update or a worker's
-- failure.
-- Pinning (BENCH_PIN): split (default: the redis-server on CPU 1, every
-- client process on CPU 0), shared (everything on CPU 0), none; without
-- taskset or with one CPU, unpinned (and it says so).
--
--   make bench-contended    (BENCH_N=2000 BENCH_P=4 BENCH_ROUNDS=3 BENCH_POLL=1 BENCH_PIN=split)
--   lua bench/contended.lua (with LUA_PATH/LUA_CPATH/BENCH_BIN as the Makefile sets)
-- At the defaults each side's run takes 1-2 s here (plus 0.9 s for the
-- workers to start), the whole run 15-25 s (BENCH_POLL=1: a third more).
local redlock = require "redlock"
local core = require "redlock.core"

local now, sleep = core.now, core.sleep
local format = string.format

-- worker URL KEY COUNTER N START_AT OUT NOTIFY
-- Writes OUT: "<start> <end>", then per acquisition "<wait> <counter read>
-- <acquired at> <release sent at>" (bench/contended_floor.c writes the same).
local function worker(url, key, counter, n, start_at, out, notify)
    local client = redlock.new { servers = { url } }
    local data = core.conn { host = url:match("//([^:/]+)"), port = tonumber(url:match(":(%d+)$")) }
    assert(data:command("PING"))
    local warm = assert(client:acquire(key .. ":warm")) -- connects before the start
    assert(warm:release())
    local opts = { wait = 60000, notify = notify }
    local waits, seqs, acquired, released = {}, {}, {}, {}
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
        waits[i], seqs[i], acquired[i], released[i] = t1 - t0, v, t1, t2
    end
    local t_end = now()
    local f = assert(io.open(out, "w"))
    f:write(format("%.3f %.3f\n", t_start, t_end))
    for i = 1, n do
        f:write(format("%.4f %d %.4f %.4f\n", waits[i], seqs[i], acquired[i], released[i]))
    end
    f:close()
    client:close()
    data:close()
end

if arg[1] == "worker" then
    worker(arg[2], arg[3], arg[4], tonumber(arg[5]), tonumber(arg[6]), arg[7], arg[8] == "notify")
    os.exit(0)
end

-- The driver -------------------------------------------------------------
local helper = require "helper"

local LUA = arg[-1] or "lua5.4"
local function env(name, default) return tonumber(os.getenv(name)) or default end
local N, P, ROUNDS = env("BENCH_N", 2000), env("BENCH_P", 4), env("BENCH_ROUNDS", 3)
local POLL = os.getenv("BENCH_POLL") == "1"
local PIN = os.getenv("BENCH_PIN") or "split"
local FLOOR = (os.getenv("BENCH_BIN") or "build/bench") .. "/contended_floor"
local median = helper.median

local function percentile(sorted, p)
    return sorted[math.max(1, math.ceil(p * #sorted))]
end

local SIDES = {
    { id = "c", name = "C 1 ms-retry loop" },
    { id = "notify", name = "redlock default (notified)", notify = true },
}
if POLL then SIDES[#SIDES + 1] = { id = "poll", name = "redlock notify=false", notify = false } end

-- Reads a worker's file: start, end, rows; nil and a reason when it is not whole.
local function read_out(out, n)
    local f = io.open(out)
    if not f then return nil, "no output" end
    local t0, t1 = f:read("*n", "*n")
    local rows = {}
    for i = 1, n do
        local w, seq, acq, rel = f:read("*n", "*n", "*n", "*n")
        if not rel then
            f:close()
            return nil, format("output cut at acquisition %d", i)
        end
        rows[i] = { w, seq, acq, rel }
    end
    f:close()
    return t0, t1, rows
end

-- One run of p workers of one side at once; returns its measurements.
local function run(server, side, round)
    local key = format("bench:contended:%s:%d", side.id, round)
    local counter = key .. ":counter"
    local start_at = now() + 500 + 100 * P
    local dir = helper.fresh_dir("bench-" .. side.id)
    local procs, outs = {}, {}
    for i = 1, P do
        outs[i] = format("%s/w%d", dir, i)
        local cmd
        if side.id == "c" then
            cmd = format("%s 127.0.0.1:%s %s %s %d %.3f %s 2>&1", helper.quote(FLOOR), server.port,
                key, counter, N, start_at, outs[i])
        else
            cmd = format("%s %s worker %s %s %s %d %.3f %s %s 2>&1", helper.quote(LUA),
                helper.quote(arg[0]), server:url(), key, counter, N, start_at, outs[i],
                side.notify and "notify" or "poll")
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
    local waits, by_seq, late = {}, {}, 0
    local t_first, t_last = math.huge, -math.huge
    local dup = 0
    for i = 1, P do
        local t0, t1, rows = read_out(outs[i], N)
        if not t0 then error(format("%s: worker %d: %s", side.name, i, t1)) end
        t_first, t_last = math.min(t_first, t0), math.max(t_last, t1)
        late = math.max(late, t0 - start_at)
        for _, r in ipairs(rows) do
            waits[#waits + 1] = r[1]
            if by_seq[r[2]] then dup = dup + 1 end
            by_seq[r[2]] = { owner = i, acq = r[3], rel = r[4] }
        end
    end
    table.sort(waits)
    local changes, gaps = 0, {}
    for seq = 1, P * N - 1 do
        local cur, prev = by_seq[seq], by_seq[seq - 1]
        if cur and prev and cur.owner ~= prev.owner then
            changes = changes + 1
            gaps[#gaps + 1] = cur.acq - prev.rel
        end
    end
    table.sort(gaps)
    local final = tonumber(server:cli("GET", counter)) or 0
    return {
        rate = P * N / ((t_last - t_first) / 1000),
        p50 = percentile(waits, 0.50), p99 = percentile(waits, 0.99), max = waits[#waits],
        changes = changes, gap = gaps[1] and percentile(gaps, 0.50),
        lost = math.max(P * N - final, dup), late = late,
    }
end

-- Pinning: returns a line saying what it did.
local function pin(server)
    local missing = helper.pin_missing()
    if PIN == "none" then return "unpinned (BENCH_PIN=none)" end
    if missing then return "unpinned: " .. missing end
    local server_cpu = PIN == "shared" and 0 or 1
    -- the clients inherit this process's CPU
    if not (helper.pin(server.pid, server_cpu) and helper.pin(nil, 0)) then
        helper.pin(server.pid, "0-1023") -- back to any CPU
        helper.pin(nil, "0-1023")
        return "unpinned: taskset could not pin to CPUs 0 and 1"
    end
    if PIN == "shared" then return "shared (redis-server and the clients on CPU 0)" end
    return "split (redis-server on CPU 1, the clients on CPU 0)"
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
    local server = helper.start_server()
    print(format("contended: %d processes x %d acquisitions of lock / GET / SET+1 / unlock, one key,"
        .. " %d rounds (%s)", P, N, ROUNDS, _VERSION))
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
            line[#line + 1] = format("%s %.0f/s p99 %.2f max %.1f", side.id, r.rate, r.p99, r.max)
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
    print(format("  %-28s %8s %9s %9s %8s %8s %16s %10s %5s", "", "acq/s", "vs C loop", "wait p50",
        "p99", "max", "owner changes", "gap p50", "lost"))
    for _, side in ipairs(SIDES) do
        local ch = collect(side.id, "changes")
        local worst = 0
        for _, r in ipairs(results[side.id]) do worst = math.max(worst, r.lost) end
        print(format("  %-28s %8.0f %8.2fx %6.2f ms %5.2f ms %5.1f ms %6d (%5.1f%%) %7s ms %5d",
            side.name, collect(side.id, "rate"), collect(side.id, "ratio"), collect(side.id, "p50"),
            collect(side.id, "p99"), collect(side.id, "max"), ch, 100 * ch / total,
            fmt(collect(side.id, "gap"), "%.2f"), worst))
    end
    local ratio, ch = collect("notify", "ratio"), collect("notify", "changes")
    local p99, max = collect("notify", "p99"), collect("notify", "max")
    local function target(text, value, met)
        print(format("  %-38s %-9s %s", text, value, met and "met" or "NOT met"))
    end
    print("targets (issue 26), redlock default, medians:")
    target("acquisitions/s >= 0.8x the C loop:", format("%.2fx", ratio), ratio >= 0.8)
    target("owner changes >= 50% of acquisitions:", format("%.1f%%", 100 * ch / total), ch >= 0.5 * total)
    target("wait p99 <= 5 ms:", format("%.2f ms", p99), p99 <= 5)
    target("wait max <= 50 ms:", format("%.1f ms", max), max <= 50)
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
