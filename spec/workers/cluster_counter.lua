-- A worker on a Redis Cluster: until DURATION ms have passed, take the
-- lock, read the counter, write it + 1, release (the counter and the lock
-- in the slot being resharded meanwhile). Prints "done <n>" and exits 0
-- when every cycle held its lock and no call failed; else exits 1 saying
-- why (an error the library could have retried is a failure too).
-- usage: cluster_counter.lua CLUSTER_URL LOCK_KEY COUNTER_KEY DURATION_MS
local redlock = require "redlock"
local core = require "redlock.core"
local addresses = require "redlock.addresses"

local url, lock_key, counter_key, duration = ...
-- timeout: how long a call waits out a slot half migrated (TRYAGAIN); the
-- spec's resharding, redis-cli commands one after another, can keep it so
-- for more than the default second on a busy machine
local client = redlock.new { servers = { url }, ttl = 5000, wait = 30000, retry_delay = 2,
    retry_jitter = 3, timeout = 10000 }
local data = core.conn(addresses.parse({ url })[1])
local deadline = core.now() + tonumber(duration)
local n = 0

local function fail(...)
    io.stderr:write("cycle ", n + 1, ": ", ...)
    io.stderr:write("\n")
    os.exit(1)
end

while core.now() < deadline do
    local lock, err = client:acquire(lock_key)
    if not lock then fail(err) end
    local v, gerr = data:command("GET", counter_key)
    if v == nil then fail(gerr) end
    v = (v == core.null) and 0 or tonumber(v)
    local ok, serr = data:command("SET", counter_key, tostring(v + 1))
    if not ok then fail(serr) end
    local released, rerr = lock:release()
    if not released then fail(rerr) end
    n = n + 1
end
client:close()
data:close()
print("done " .. n)
os.exit(0)
