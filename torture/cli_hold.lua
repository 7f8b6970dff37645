--- The command `redlock run` runs for the workload: the hold's fenced
-- work, recorded. Its window is [its start, its end], cut to the first
-- validity the lock had, counted (conservatively) from before the
-- `redlock` process was started: ttl less the drift allowance.
-- usage: cli_hold.lua CONFIG NAME ID KIND KEYS TTL WAIT SENT PAUSE
local core = require "redlock.core"
local record = require "torture.record"
local resource = require "torture.resource"
local workload = require "torture.workload"

local config_path, name, id, kind, keys_text, ttl, wait, sent, pause = ...
local config = dofile(config_path)
ttl, wait, sent, pause = tonumber(ttl), tonumber(wait), tonumber(sent), tonumber(pause)
local ret = core.now()
-- mark: the hold ran (the loop records a failure otherwise)
local mark = io.open(config.history .. "/cli-held." .. id, "w")
mark:close()
local log = record.writer(config.history .. "/" .. name .. ".log")
local keys = {}
for k in keys_text:gmatch("[^,]+") do keys[#keys + 1] = k end
local valid_until = sent + ttl - (ttl * 0.01 + 2)
local lock = { fence = tonumber(os.getenv("REDLOCK_FENCE")) }
if os.getenv("REDLOCK_FENCES") and kind == "group" then
    lock.fences = {}
    local i = 0
    for f in os.getenv("REDLOCK_FENCES"):gmatch("[^\n]+") do
        i = i + 1
        lock.fences[keys[i]] = tonumber(f)
    end
end
function lock.remaining() return math.max(0, math.floor(valid_until - core.now())) end
local fences
if lock.fences then
    local t = {}
    for i, k in ipairs(keys) do t[i] = k .. ":" .. string.format("%.0f", lock.fences[k]) end
    fences = table.concat(t, ",")
end
log { "ev", "acq", "id", id, "c", name, "kind", kind, "keys", keys_text, "ttl", ttl, "wait", wait, "style", "cli",
    "sent", sent, "ret", ret, "ok", 1, "remt", ret, "rem", math.max(0, valid_until - ret), "fence", lock.fence,
    "fences", fences }
local data = core.conn { path = config.resource }
workload.work({ resource = resource.ops(function(...) return data:command(...) end), now = core.now,
    sleep = core.sleep, log = log }, id, kind, keys, lock, pause)
local t = core.now()
log { "ev", "rel", "id", id, "sent", t, "ret", t, "ok", 1 }
