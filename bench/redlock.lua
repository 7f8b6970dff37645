--- Benchmark: the Redlock acquire+release cycle over 5 servers, as a ratio
-- to the single-server cycle, measured in the same run on the same machine
-- (issue 4's target: <= 1.3x), next to the floor: plain hiredis in C doing
-- the same round trips (bench/redlock_floor.c), so that what the machine
-- costs and what this library adds can be told apart.
-- Starts its own redis-servers (spec/helper.lua) and stops them at the end.
--   make bench-redlock          (CYCLES=500 ROUNDS=11 by default)
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"

local now, format = core.now, string.format
local CYCLES = tonumber(os.getenv("CYCLES")) or 500
local ROUNDS = tonumber(os.getenv("ROUNDS")) or 11
local FLOOR = os.getenv("FLOOR") or "build/bench/redlock_floor"

local function cycle_us(client, key, n)
    local t0 = now()
    for _ = 1, n do
        local lock = assert(client:acquire(key))
        assert(lock:release())
    end
    return (now() - t0) * 1000 / n
end

-- The floor, one run: us per cycle on 1 server and on all of them.
local function floor_us(ports)
    local out = helper.read_cmd(format("%s %d %s %s 127.0.0.1 %s", helper.quote(FLOOR), CYCLES,
        core.scripts.acquire.sha, core.scripts.release.sha, table.concat(ports, " ")))
    local one, many = out:match("^1 ([%d.]+)\n%d+ ([%d.]+)")
    assert(one, "the floor failed: " .. out)
    return tonumber(one), tonumber(many)
end

local function median(t)
    local s = {}
    for i, v in ipairs(t) do s[i] = v end
    table.sort(s)
    return s[math.floor((#s + 1) / 2)]
end

local function main()
    local urls, ports = {}, {}
    for i = 1, 5 do
        local server = helper.start_server()
        urls[i], ports[i] = server:url(), server.port
    end
    -- A generous per-server timeout: this measures the path where every
    -- server answers, and a busy host must not turn a stall into a failure.
    local one = redlock.new { servers = { urls[1] } }
    local five = redlock.new { servers = urls, server_timeout = 1000 }
    -- warm up: connections, script caches on every server
    cycle_us(one, "bench:1", 200)
    cycle_us(five, "bench:5", 200)
    local r = { one = {}, five = {}, ratio = {}, f1 = {}, f5 = {}, fratio = {} }
    -- Interleaved rounds, so that load from elsewhere hits all alike.
    for i = 1, ROUNDS do
        r.one[i] = cycle_us(one, "bench:1", CYCLES)
        r.five[i] = cycle_us(five, "bench:5", CYCLES)
        r.ratio[i] = r.five[i] / r.one[i]
        r.f1[i], r.f5[i] = floor_us(ports)
        r.fratio[i] = r.f5[i] / r.f1[i]
    end
    one:close()
    five:close()
    print(format("redlock cycle (acquire + release), TCP on 127.0.0.1, medians of %d rounds of %d cycles",
        ROUNDS, CYCLES))
    print(format("  %-34s %9s %9s %7s", "", "1 server", "5 servers", "5/1"))
    print(format("  %-34s %7.1fus %7.1fus %6.2fx", "redlock (this library)",
        median(r.one), median(r.five), median(r.ratio)))
    print(format("  %-34s %7.1fus %7.1fus %6.2fx", "floor (hiredis in C, same trips)",
        median(r.f1), median(r.f5), median(r.fratio)))
    print(format("  %-34s %8.2fx %8.2fx", "redlock / floor",
        median(r.one) / median(r.f1), median(r.five) / median(r.f5)))
    print(format("ratio 5/1: %.2fx (target <= 1.30x; the floor's own ratio is %.2fx on this machine)",
        median(r.ratio), median(r.fratio)))
end

local ok, err = pcall(main)
helper.stop_all()
if not ok then
    io.stderr:write(tostring(err), "\n")
    os.exit(1)
end
