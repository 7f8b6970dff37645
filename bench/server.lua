--- Benchmark: what a lock costs the server. In one run, against a
-- redis-server of its own (spec/helper.lua):
--   memory: bytes of used_memory (INFO memory) per held lock, over LOCKS
--   locks held at once, against a plain `SET key <token> PX ttl` of the
--   same keys (the least a lock can store);
--   CPU: the server process's CPU time (INFO cpu: getrusage, user + system)
--   per uncontended acquire+release, and the time inside its commands
--   (INFO commandstats), against the floor (bench/floor.c "cycle": the
--   library's own round trips from C) and the textbook SET NX PX cycle
--   ("setnx", no fence), each side CYCLES cycles, ROUNDS rounds (median).
--   make bench-server     (LOCKS=20000 CYCLES=20000 ROUNDS=3)
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"

local format = string.format
local function env(name, default) return tonumber(os.getenv(name)) or default end
local LOCKS, CYCLES, ROUNDS = env("LOCKS", 20000), env("CYCLES", 20000), env("ROUNDS", 3)
local FLOOR = os.getenv("REDLOCK_FLOOR") or "build/bench/floor"

local server = helper.start_server()
local data = core.conn(server:spec())

local function used_memory()
    return tonumber(data:command("INFO", "memory"):match("used_memory:(%d+)"))
end

local median = helper.median

-- Memory: LOCKS held locks, then LOCKS plain keys, each from an empty
-- database (the fence counter stays: one key for all).
local client = redlock.new { servers = { server:url() } }
assert(client:acquire("warm")):release()
data:command("FLUSHALL")
local base = used_memory()
local locks = {}
for i = 1, LOCKS do locks[i] = assert(client:acquire(format("bench:mem:%d", i), { ttl = 600000 })) end
local lock_bytes = (used_memory() - base) / LOCKS
for i = 1, LOCKS do assert(locks[i]:release()) end
data:command("FLUSHALL")
base = used_memory()
for i = 1, LOCKS do assert(data:command("SET", format("bench:mem:%d", i), core.token(), "PX", "600000")) end
local plain_bytes = (used_memory() - base) / LOCKS
data:command("FLUSHALL")

-- CPU time of the server process, ms: user + system of its main thread
-- and the rest, as INFO cpu reports them (getrusage, microseconds; the
-- clock ticks of /proc/<pid>/stat are too coarse for a few seconds of run).
local function server_cpu_ms()
    local info = data:command("INFO", "cpu")
    local user = tonumber(info:match("used_cpu_user:([%d.]+)"))
    local sys = tonumber(info:match("used_cpu_sys:([%d.]+)"))
    return (user + sys) * 1000
end

local function commands_usec()
    local total = 0
    for name, usec in data:command("INFO", "commandstats"):gmatch("cmdstat_(%w+):calls=%d+,usec=(%d+)") do
        if name ~= "info" then total = total + tonumber(usec) end
    end
    return total
end

-- us of server CPU and of time inside commands per cycle, for fn()
local function measure(fn)
    data:command("CONFIG", "RESETSTAT")
    local c0 = server_cpu_ms()
    fn()
    local cpu = (server_cpu_ms() - c0) * 1000 / CYCLES
    return cpu, commands_usec() / CYCLES
end

local sides = {
    { name = "redlock acquire+release", fn = function()
        for _ = 1, CYCLES do assert(client:acquire("bench:cpu")):release() end
    end },
    { name = "floor (same round trips, C)", fn = function()
        local out = helper.read_cmd(format("%s -n %d -w 0 -k bench:cpu cycle 127.0.0.1:%d", FLOOR, CYCLES,
            server.port))
        assert(out:find("ns_per_op="), out)
    end },
    { name = "textbook SET NX PX (no fence)", fn = function()
        local out = helper.read_cmd(format("%s -n %d -w 0 -k bench:cpu setnx 127.0.0.1:%d", FLOOR, CYCLES,
            server.port))
        assert(out:find("ns_per_op="), out)
    end },
}
for _, side in ipairs(sides) do side.cpu, side.inside = {}, {} end
for _ = 1, ROUNDS do
    for _, side in ipairs(sides) do
        local cpu, inside = measure(side.fn)
        side.cpu[#side.cpu + 1], side.inside[#side.inside + 1] = cpu, inside
    end
end

print(format("bench-server: memory of %d locks held at once; server CPU over %d cycles, median of %d rounds",
    LOCKS, CYCLES, ROUNDS))
print(format("  memory per held lock: %.0f bytes; plain SET key token PX: %.0f bytes; ratio %.2fx",
    lock_bytes, plain_bytes, lock_bytes / plain_bytes))
local floor_cpu = median(sides[2].cpu)
for _, side in ipairs(sides) do
    print(format("  %-32s server CPU %6.1f us/cycle (%.2fx the floor), inside commands %5.1f us/cycle",
        side.name, median(side.cpu), median(side.cpu) / floor_cpu, median(side.inside)))
end
client:close()
data:close()
helper.stop_all()
