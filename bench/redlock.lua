--- Benchmark: the Redlock acquire+release cycle over 5 servers, as a ratio
-- to the single-server cycle, measured in the same run on the same machine
-- (issue 4's target: <= 1.3x), next to the floor: plain hiredis in C doing
-- the same round trips (bench/redlock_floor.c), so that what the machine
-- costs and what this library adds can be told apart.
--
-- Two settings: the servers on loopback as they are, where every request
-- costs CPU (the client's, the kernel's, a server's) and hardly any wire
-- time; and behind bench/delay_proxy.c, which holds every byte RTT_US/2
-- each way, standing for servers on other machines, where the round trip
-- dominates (RTT_US=0 skips it).
-- Starts its own redis-servers (spec/helper.lua) and stops them at the end.
--   make bench-redlock     (CYCLES=500 ROUNDS=11 RTT_US=1000 RTT_CYCLES=100)
local helper = require "helper"
local report = dofile("bench/report.lua")
local redlock = require "redlock"
local core = require "redlock.core"

local format = string.format
local function env(name, default) return tonumber(os.getenv(name)) or default end
local CYCLES, ROUNDS = env("CYCLES", 500), env("ROUNDS", 11)
local RTT_US, RTT_CYCLES = env("RTT_US", 1000), env("RTT_CYCLES", 100)
local BIN = os.getenv("BENCH_BIN") or "build/bench"

local cycle_us = helper.cycle_us

-- The floor, one run: us per cycle on the first port, and on all of them.
local function floor_us(ports, cycles)
    local out = helper.read_cmd(format("%s/redlock_floor %d %s %s 127.0.0.1 %s", BIN, cycles,
        core.scripts.acquire.sha, core.scripts.release.sha, table.concat(ports, " ")))
    local one, many = out:match("^1 ([%d.]+)\n%d+ ([%d.]+)")
    assert(one, "the floor failed: " .. out)
    return tonumber(one), tonumber(many)
end

local median = helper.median

-- Starts a delay proxy in front of each port (one process each, as each
-- server has its own network path); returns their ports and pids.
local function start_proxies(ports, one_way_us)
    local out, pids = {}, {}
    for i, port in ipairs(ports) do
        local dir = helper.fresh_dir("proxy")
        os.execute(format("sh -c '%s/delay_proxy %d 900 %d >%s/out 2>&1 & echo $! >%s/pid'",
            BIN, one_way_us, port, dir, dir))
        pids[i] = helper.read_cmd("cat " .. dir .. "/pid"):match("%d+")
        for _ = 1, 250 do
            out[i] = tonumber(helper.read_cmd("cat " .. dir .. "/out 2>/dev/null"):match("^ports (%d+)"))
            if out[i] then break end
            helper.sleep(20)
        end
        assert(out[i], "the delay proxy did not start: " .. helper.read_cmd("cat " .. dir .. "/out"))
    end
    return out, pids
end

local function measure(title, ports, cycles)
    local urls = {}
    for i, p in ipairs(ports) do urls[i] = format("redis://127.0.0.1:%d", p) end
    -- A generous per-server timeout: this measures the path where every
    -- server answers, and a busy host must not turn a stall into a failure.
    local one = redlock.new { servers = { urls[1] } }
    local five = redlock.new { servers = urls, server_timeout = 1000 }
    -- without fences: no write-back of the fence, one parallel round trip less
    local bare = redlock.new { servers = urls, server_timeout = 1000, fence = false }
    -- warm up: connections, script caches on every server
    cycle_us(one, "bench:1", 20)
    cycle_us(five, "bench:5", 20)
    cycle_us(bare, "bench:5b", 20)
    local r = { one = {}, five = {}, ratio = {}, f1 = {}, f5 = {}, fratio = {}, bare = {}, fence = {} }
    -- Interleaved rounds, so that load from elsewhere hits all alike.
    for i = 1, ROUNDS do
        r.one[i] = cycle_us(one, "bench:1", cycles)
        r.five[i] = cycle_us(five, "bench:5", cycles)
        r.ratio[i] = r.five[i] / r.one[i]
        r.bare[i] = cycle_us(bare, "bench:5b", cycles)
        r.fence[i] = r.five[i] / r.bare[i]
        r.f1[i], r.f5[i] = floor_us(ports, cycles)
        r.fratio[i] = r.f5[i] / r.f1[i]
    end
    one:close()
    five:close()
    bare:close()
    print(format("%s: medians of %d rounds of %d cycles", title, ROUNDS, cycles))
    print(format("  %-34s %9s %9s %7s", "", "1 server", "5 servers", "5/1"))
    print(format("  %-34s %7.1fus %7.1fus %6.2fx", "redlock (this library)",
        median(r.one), median(r.five), median(r.ratio)))
    print(format("  %-34s %7.1fus %7.1fus %6.2fx", "floor (hiredis in C, same trips)",
        median(r.f1), median(r.f5), median(r.fratio)))
    print(format("  %-34s %8.2fx %8.2fx", "redlock / floor",
        median(r.one) / median(r.f1), median(r.five) / median(r.f5)))
    print(format("  %-34s %9s %7.1fus %6.2fx", "redlock, fence = false", "", median(r.bare), median(r.fence)))
    print("  (the last column there: the default, with its fence write-back, against fence = false)")
    report.row("redlock", { title, format("%.1f us", median(r.one)), format("%.1f us", median(r.five)),
        format("%.2fx", median(r.ratio)), format("%.2fx", median(r.fratio)),
        format("%.1f us", median(r.bare)),
        format("%.2fx", median(r.fence)) })
    return median(r.ratio), median(r.fratio)
end

local function main()
    local ports = {}
    for i = 1, 5 do ports[i] = helper.start_server().port end
    print("redlock acquire+release cycle, 5 servers vs 1 (target: 5/1 <= 1.30x)")
    report.table("redlock", format("Redlock: the acquire+release cycle over 5 servers against 1, medians"
        .. " of %d rounds; the floor: the same round trips in C", ROUNDS), { "", "1 server", "5 servers",
        "5/1", "floor 5/1", "5 servers, fence = false", "default / fence = false" })
    local ratio, fratio = measure("loopback (127.0.0.1, TCP)", ports, CYCLES)
    print(format("ratio 5/1 on loopback: %.2fx (the floor's: %.2fx)", ratio, fratio))
    if RTT_US > 0 then
        local proxied, pids = start_proxies(ports, RTT_US / 2)
        local ok, a, b = pcall(measure, format("behind a proxy adding a %d us round trip", RTT_US),
            proxied, RTT_CYCLES)
        os.execute("kill " .. table.concat(pids, " "))
        assert(ok, a)
        print(format("ratio 5/1 with a %d us round trip: %.2fx (the floor's: %.2fx)", RTT_US, a, b))
        report.target(format("Redlock, 5 servers against 1, with a %d us round trip", RTT_US),
            format("%.2fx", a),
            "<= 1.30x", a <= 1.3, true)
    end
end

local ok, err = pcall(main)
helper.stop_all()
if not ok then
    io.stderr:write(tostring(err), "\n")
    os.exit(1)
end
