--- Benchmark: what a held lock costs the server's memory, against a
-- redis-server of its own (spec/helper.lua): bytes of used_memory (INFO
-- memory) per held lock, over LOCKS locks held at once, against a plain
-- `SET key <token> PX ttl` of the same keys (the least a lock can store).
-- The server's CPU per cycle is in `make bench` (bench/bench.lua), next to
-- the floor's in the same rounds, from /proc/<pid>/task/*/schedstat.
--   make bench-server     (LOCKS=20000)
local helper = require "helper"
local report = dofile("bench/report.lua")
local redlock = require "redlock"
local core = require "redlock.core"

local format = string.format
local function env(name, default) return tonumber(os.getenv(name)) or default end
local LOCKS = env("LOCKS", 20000)

local server = helper.start_server()
local data = core.conn(server:spec())

local function used_memory()
    return tonumber(data:command("INFO", "memory"):match("used_memory:(%d+)"))
end

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

print(format("bench-server: memory of %d locks held at once", LOCKS))
print(format("  memory per held lock: %.0f bytes; plain SET key token PX: %.0f bytes; ratio %.2fx",
    lock_bytes, plain_bytes, lock_bytes / plain_bytes))
print("  (the server's CPU per cycle, against the floor's: `make bench`, second table)")
report.table("costs", "What else costs what: the uncontended acquire+release cycle (us) or a held lock's"
    .. " memory, against the same without the feature", { "", "with", "without", "ratio" })
report.row("costs", { "memory per held lock (without: a plain SET key token PX)",
    format("%.0f bytes", lock_bytes), format("%.0f bytes", plain_bytes),
    format("%.2fx", lock_bytes / plain_bytes) })
client:close()
data:close()
helper.stop_all()
