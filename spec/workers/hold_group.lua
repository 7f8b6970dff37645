-- A worker process that waits up to WAIT_MS for a group lock of the keys
-- given, with a client whose polling would sleep 10 s, and exits holding
-- it: prints "held <token>", or "failed <code> <err>".
-- usage: hold_group.lua SERVER WAIT_MS KEY...
-- (environment HOLD_GROUP_REPLICAS=N: the group waits for N replicas)
local redlock = require "redlock"

local url, wait = ...
local keys = { select(3, ...) }
local client = redlock.new { servers = { url }, ttl = 60000, retry_delay = 10000, retry_jitter = 0 }
local replicas = tonumber(os.getenv("HOLD_GROUP_REPLICAS") or "")
local lock, err, code = client:acquire(keys, { wait = tonumber(wait), replicas = replicas })
if not lock then
    print("failed " .. tostring(code) .. " " .. tostring(err))
    os.exit(0)
end
print("held " .. lock.token)
os.exit(0)
