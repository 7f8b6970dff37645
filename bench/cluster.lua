--- Benchmark: the uncontended acquire+release cycle on a Redis Cluster (a
-- key on one of its masters, through the client's slot map) against the
-- same cycle on a plain redis-server, in interleaved rounds of one run; and
-- what a MOVED costs: a cycle right after the key's slot moved to another
-- master (the redirection, the reloaded map, a new connection) against a
-- cycle on a current map.
-- Starts its own 3-master Cluster and plain server (spec/helper.lua),
-- pinned to CPU 1 with this process on CPU 0, and stops them at the end.
--   make bench-cluster     (CYCLES=500 ROUNDS=9 MOVES=20)
local helper = require "helper"
local report = dofile("bench/report.lua")
local redlock = require "redlock"

local format = string.format
local function env(name, default) return tonumber(os.getenv(name)) or default end
local CYCLES, ROUNDS, MOVES = env("CYCLES", 500), env("ROUNDS", 9), env("MOVES", 20)

local cycle_us = helper.cycle_us

local cluster = helper.start_cluster(3, 0)
local plain = helper.start_server()
-- the "split" regime: every server on CPU 1, this process on CPU 0, so
-- that where the scheduler puts them does not decide the ratio
for _, node in ipairs(cluster.nodes) do helper.pin(node.pid, 1) end
helper.pin(plain.pid, 1)
helper.pin(nil, 0)
local on_cluster = redlock.new { servers = { cluster.url } }
local on_plain = redlock.new { servers = { plain:url() } }
local key = "bench:cluster"
cycle_us(on_cluster, key, 50)
cycle_us(on_plain, key, 50)
local rc, rp = {}, {}
for _ = 1, ROUNDS do
    rp[#rp + 1] = cycle_us(on_plain, key, CYCLES)
    rc[#rc + 1] = cycle_us(on_cluster, key, CYCLES)
end

-- MOVED: the key's slot (no keys in it between cycles but the fence
-- counter) handed to the next master, then one cycle; against one cycle
-- on a current map, measured the same way
local masters = {}
for _, node in ipairs(cluster.nodes) do masters[#masters + 1] = node end
local moved, steady = {}, {}
for _ = 1, MOVES do
    local from, slot = helper.cluster_owner(cluster, key)
    local to = masters[1] == from and masters[2] or masters[1]
    helper.move_slot(cluster, slot, from, to)
    moved[#moved + 1] = cycle_us(on_cluster, key, 1)
    steady[#steady + 1] = cycle_us(on_cluster, key, 1)
end

local mp, mc = helper.median(rp), helper.median(rc)
print(format("Cluster vs plain server, uncontended acquire+release (median of %d rounds of %d cycles)",
    ROUNDS, CYCLES))
print(format("  plain server      %8.1f us/cycle", mp))
print(format("  Cluster (3 masters) %6.1f us/cycle   ratio %.2fx", mc, mc / mp))
local mm, ms = helper.median(moved), helper.median(steady)
print(format("  after a MOVED     %8.1f us/cycle against %.1f on a current map (%.1fx; median of %d moves)",
    mm, ms, mm / ms, MOVES))
report.table("costs", "What else costs what: the uncontended acquire+release cycle (us) or a held lock's"
    .. " memory, against the same without the feature", { "", "with", "without", "ratio" })
report.row("costs", { "Cluster of 3 masters (without: a plain server)", format("%.1f us", mc),
    format("%.1f us", mp), format("%.2fx", mc / mp) })
report.row("costs", { "a cycle after a MOVED (without: on a current slot map)", format("%.1f us", mm),
    format("%.1f us", ms), format("%.1fx", mm / ms) })
on_cluster:close()
on_plain:close()
helper.stop_all()
