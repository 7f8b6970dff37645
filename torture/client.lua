--- A workload process in plain Lua: holds one lock after another (see
-- torture/workload.lua) until the run's stop file appears, recording
-- every call in its own history file.
-- usage: client.lua CONFIG NAME
local redlock = require "redlock"
local core = require "redlock.core"
local record = require "torture.record"
local resource = require "torture.resource"
local rng_mod = require "torture.rng"
local workload = require "torture.workload"

local config_path, name = ...
local config = dofile(config_path)
local me = assert(config.clients[name], "no client " .. tostring(name))

local function exists(path)
    local f = io.open(path)
    if f then f:close() end
    return f ~= nil
end

local log = record.writer(config.history .. "/" .. name .. ".log")
local f = io.open("/proc/self/stat")
local pid = f and f:read("*l"):match("^(%d+)")
if f then f:close() end
log { "ev", "start", "c", name, "pid", pid, "t", core.now() }

local data = core.conn { path = config.resource }
local client = redlock.new(me.opts)
local rng = rng_mod.new(config.seed, me.stream)
local w = workload.new {
    client = client, rng = rng, name = name, now = core.now, sleep = core.sleep, log = log,
    resource = resource.ops(function(...) return data:command(...) end), plan = me.plan,
}
-- (after a failure that is not a refusal, a pause, as a user's retry
-- loop would make: a server that is down answers at once)
local BACKOFF = { connection = true, server = true, ["no quorum"] = true, replicas = true, crash = true }
while not exists(config.stop) do
    local code = w:hold()
    core.sleep(BACKOFF[code] and rng:int(50, 150) or rng:int(0, 20))
end
client:close()
log { "ev", "end", "c", name, "t", core.now() }
