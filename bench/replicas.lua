--- Benchmark: the uncontended acquire+release cycle with replicas = 1 (WAIT
-- sent with the lock script) against the same cycle with replicas = 0 on
-- the same master, which has one replica, measured in the same run in
-- interleaved rounds; and the same for Redlock over 3 masters, each with a
-- replica. Connections are made once (warm-up).
-- Starts its own redis-servers (spec/helper.lua) and stops them at the end.
--   make bench-replicas     (CYCLES=500 ROUNDS=9)
local helper = require "helper"
local report = dofile("bench/report.lua")
local redlock = require "redlock"

local format = string.format
local function env(name, default) return tonumber(os.getenv(name)) or default end
local CYCLES, ROUNDS = env("CYCLES", 500), env("ROUNDS", 9)

local cycle_us = helper.cycle_us

local median = helper.median

local masters, urls = {}, {}
for i = 1, 3 do
    masters[i] = helper.start_server()
    helper.start_replica(masters[i])
    urls[i] = masters[i]:url()
end
local clients = {
    { "single, replicas = 0", redlock.new { servers = { urls[1] } } },
    { "single, replicas = 1", redlock.new { servers = { urls[1] }, replicas = 1 } },
    { "Redlock x3, replicas = 0", redlock.new { servers = urls, server_timeout = 1000 } },
    { "Redlock x3, replicas = 1", redlock.new { servers = urls, server_timeout = 1000, replicas = 1 } },
}
local results = {}
for i, c in ipairs(clients) do
    cycle_us(c[2], "bench:replicas:" .. i, 20) -- connections, script caches
    results[i] = {}
end
for _ = 1, ROUNDS do
    for i, c in ipairs(clients) do
        results[i][#results[i] + 1] = cycle_us(c[2], "bench:replicas:" .. i, CYCLES)
    end
end
print(format("replicas = 1 vs 0, uncontended acquire+release, each master with one replica"
    .. " (median of %d rounds of %d cycles)", ROUNDS, CYCLES))
local med = {}
for i, c in ipairs(clients) do
    med[i] = median(results[i])
    print(format("  %-26s %8.1f us/cycle", c[1], med[i]))
    c[2]:close()
end
print(format("  ratio replicas=1/replicas=0: single %.2fx, Redlock x3 %.2fx", med[2] / med[1],
    med[4] / med[3]))
report.table("costs", "What else costs what: the uncontended acquire+release cycle (us) or a held lock's"
    .. " memory, against the same without the feature", { "", "with", "without", "ratio" })
report.row("costs", { "single, replicas = 1 (without: replicas = 0)", format("%.1f us", med[2]),
    format("%.1f us", med[1]), format("%.2fx", med[2] / med[1]) })
report.row("costs", { "Redlock x3, replicas = 1 (without: replicas = 0)", format("%.1f us", med[4]),
    format("%.1f us", med[3]), format("%.2fx", med[4] / med[3]) })
helper.stop_all()
