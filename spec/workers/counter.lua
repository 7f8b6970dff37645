-- A worker process: n times, take the lock, read the counter, write it + 1,
-- release. Prints "done <n>" and exits 0 when every cycle held the lock;
-- exits 1 on the first failure, saying why.
-- usage: counter.lua SERVERS(comma-separated) LOCK_KEY COUNTER_KEY N [MODE]
local redlock = require "redlock"
local core = require "redlock.core"

local servers_arg, lock_key, counter_key, n, mode = ...
local servers = {}
for url in servers_arg:gmatch("[^,]+") do servers[#servers + 1] = url end
n = tonumber(n)

local client = redlock.new { servers = servers, ttl = 5000, wait = 60000, retry_delay = 2,
    retry_jitter = 3, mode = mode }
local data = core.conn(require("redlock.addresses").parse_url(servers[1]))

for i = 1, n do
    local lock, err = client:acquire(lock_key)
    if not lock then
        io.stderr:write("cycle ", i, ": ", err, "\n")
        os.exit(1)
    end
    local v = data:command("GET", counter_key)
    v = (v == core.null) and 0 or tonumber(v)
    assert(data:command("SET", counter_key, tostring(v + 1)))
    local ok, rerr = lock:release()
    if not ok then
        io.stderr:write("cycle ", i, ": ", rerr, "\n")
        os.exit(1)
    end
end
client:close()
data:close()
print("done " .. n)
os.exit(0)
