-- A worker process that takes one permit of a semaphore and holds it
-- without releasing: prints "held <token>" and sleeps until killed; or,
-- with WAIT_MS, waits that long for a permit first and prints
-- "held <token> <fence>" or "failed <code>" and exits.
-- usage: hold_permit.lua SERVER KEY LIMIT TTL [WAIT_MS] (LIMIT 0: a single
-- lock or writer; "r": a reader, shared = true)
local redlock = require "redlock"
local core = require "redlock.core"

local url, key, limit, ttl, wait = ...
local client = redlock.new { servers = { url }, ttl = tonumber(ttl), retry_delay = 5000, retry_jitter = 0 }
local opts = { wait = tonumber(wait or 0) }
if limit == "r" then
    opts.shared = true
elseif tonumber(limit) > 0 then
    opts.limit = tonumber(limit)
end
local permit, err, code = client:acquire(key, opts)
if not permit then
    print("failed " .. tostring(code) .. " " .. tostring(err))
    io.stdout:flush()
    os.exit(0)
end
-- (this process's own pid, for the spec's SIGKILL)
local pid = io.open("/proc/self/stat"):read("*l"):match("^%d+")
print("held " .. permit.token .. " " .. string.format("%.0f", permit.fence) .. " " .. pid)
io.stdout:flush()
if wait then os.exit(0) end
while true do core.sleep(1000) end
