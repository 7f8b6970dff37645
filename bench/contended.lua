-- The contended case: P processes (default 4) on one key, each N times
-- lock / GET / SET+1 / unlock, against a redis-server of its own.
-- Reports acquisitions/s, the wait for the lock (p50/p99/max), how often
-- the owner changed, lost updates, and the rate of one process doing the
-- same alone (before and after; their mean is the reference), all measured
-- in this run.
--
--   make bench-contended            (BENCH_N=2000 BENCH_P=4 BENCH_POLL=1)
--   lua bench/contended.lua         (with LUA_PATH/LUA_CPATH as the Makefile sets)
-- BENCH_POLL=1 adds the same run with notify = false (polling with the
-- default retry_delay), for comparison.
local redlock = require "redlock"
local core = require "redlock.core"

local now, sleep = core.now, core.sleep
local format = string.format

-- worker URL KEY COUNTER N START_AT OUT NOTIFY
local function worker(url, key, counter, n, start_at, out, notify)
    local client = redlock.new { servers = { url } }
    local data = core.conn { host = url:match("//([^:/]+)"), port = tonumber(url:match(":(%d+)$")) }
    assert(data:command("PING"))
    local warm = assert(client:acquire(key .. ":warm")) -- connects before the start
    assert(warm:release())
    local opts = { wait = 60000, notify = notify }
    local waits, seqs = {}, {}
    sleep(start_at - now())
    local t_start = now()
    for i = 1, n do
        local t0 = now()
        local lock = assert(client:acquire(key, opts))
        waits[i] = now() - t0
        local v = tonumber(data:command("GET", counter)) or 0
        assert(data:command("SET", counter, v + 1))
        seqs[i] = v
        assert(lock:release())
    end
    local t_end = now()
    local f = assert(io.open(out, "w"))
    f:write(format("%.3f %.3f\n", t_start, t_end))
    for i = 1, n do f:write(format("%.4f %d\n", waits[i], seqs[i])) end
    f:close()
    client:close()
    data:close()
end

if arg[1] == "worker" then
    worker(arg[2], arg[3], arg[4], tonumber(arg[5]), tonumber(arg[6]), arg[7], arg[8] == "notify")
    os.exit(0)
end

-- The driver -------------------------------------------------------------
package.path = "spec/?.lua;" .. package.path
local helper = require "helper"

local LUA = arg[-1] or "lua5.4"
local N = tonumber(os.getenv("BENCH_N")) or 2000
local P = tonumber(os.getenv("BENCH_P")) or 4

local function percentile(sorted, p)
    local i = math.ceil(p * #sorted)
    if i < 1 then i = 1 end
    return sorted[i]
end

-- Runs p workers at once; returns the merged measurements.
local function run(server, p, n, notify, tag)
    local key, counter = "bench:" .. tag, "bench:" .. tag .. ":counter"
    local start_at = now() + 1000 + 100 * p
    local dir = helper.fresh_dir("bench-" .. tag)
    local procs, outs = {}, {}
    for i = 1, p do
        outs[i] = format("%s/w%d", dir, i)
        local cmd = format("%s %s worker %s %s %s %d %.3f %s %s 2>&1", helper.quote(LUA),
            helper.quote(arg[0]), server:url(), key, counter, n, start_at, outs[i],
            notify and "notify" or "poll")
        procs[i] = assert(io.popen(cmd))
    end
    for i = 1, p do
        local msg = procs[i]:read("*a")
        local ok = procs[i]:close()
        if not ok then error("worker " .. i .. " failed: " .. msg) end
    end
    local waits, owner_of = {}, {}
    local t_first, t_last = math.huge, -math.huge
    for i = 1, p do
        local f = assert(io.open(outs[i]))
        local t0, t1 = f:read("*n", "*n")
        if t0 < t_first then t_first = t0 end
        if t1 > t_last then t_last = t1 end
        for _ = 1, n do
            local w, seq = f:read("*n", "*n")
            waits[#waits + 1] = w
            owner_of[seq] = i
        end
        f:close()
    end
    table.sort(waits)
    local changes = 0
    for seq = 1, p * n - 1 do
        if owner_of[seq] ~= owner_of[seq - 1] then changes = changes + 1 end
    end
    local final = tonumber(server:cli("GET", counter))
    return {
        rate = p * n / ((t_last - t_first) / 1000),
        p50 = percentile(waits, 0.50), p99 = percentile(waits, 0.99), max = waits[#waits],
        changes = changes, lost = p * n - final,
    }
end

local function report(name, r, single)
    print(format("%-28s %8.0f acq/s  %5.2fx single  wait p50 %6.2f ms  p99 %6.2f ms  max %7.2f ms"
        .. "  owner changes %5d  lost updates %d",
        name, r.rate, r.rate / single, r.p50, r.p99, r.max, r.changes, r.lost))
end

local ok, err = pcall(function()
    local server = helper.start_server()
    print(format("contended: %d processes x %d iterations of lock / GET / SET+1 / unlock, one key (%s)",
        P, N, _VERSION))
    -- the reference runs before and after (the mean is the rate compared
    -- with): a shared machine's load drifts during a run
    local before = run(server, 1, N, true, "single1")
    local notified = run(server, P, N, true, "notify")
    local polled = os.getenv("BENCH_POLL") == "1" and run(server, P, N, false, "poll")
    local after = run(server, 1, N, true, "single2")
    local single = (before.rate + after.rate) / 2
    report("1 process, before", before, single)
    report("1 process, after", after, single)
    report(format("%d processes, notified", P), notified, single)
    if polled then report(format("%d processes, polling", P), polled, single) end
    print(format("target: p99 <= 5 ms, max <= 50 ms, rate >= 0.5x single: %s",
        (notified.p99 <= 5 and notified.max <= 50 and notified.rate >= 0.5 * single)
        and "met" or "NOT met"))
end)
helper.stop_all()
if not os.getenv("REDLOCK_TEST_TMP") then os.execute("rm -rf " .. helper.quote(helper.root())) end
if not ok then
    io.stderr:write(tostring(err), "\n")
    os.exit(1)
end
