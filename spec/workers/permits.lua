-- A worker process: n times with_lock of a semaphore (limit), inside it
-- INCR the resource's "inside" counter, hold a few ms, DECR it. Prints
-- "done <n> max <most inside seen>" and exits 0; exits 1 on the first
-- failure, saying why.
-- usage: permits.lua SERVER KEY INSIDE_KEY LIMIT N
local redlock = require "redlock"
local core = require "redlock.core"
local addresses = require "redlock.addresses"

local url, key, inside, limit, n = ...
limit, n = tonumber(limit), tonumber(n)
local client = redlock.new { servers = { url }, ttl = 5000, wait = 60000, retry_delay = 5, retry_jitter = 5 }
local data = core.conn(addresses.parse({ url })[1])
local most = 0
for i = 1, n do
    local ok, err = client:with_lock(key, { limit = limit }, function()
        local c = assert(data:command("INCR", inside))
        if c > most then most = c end
        core.sleep(2 + i % 5)
        assert(data:command("DECR", inside))
    end)
    if not ok then
        io.stderr:write("cycle ", i, ": ", tostring(err), "\n")
        os.exit(1)
    end
end
client:close()
data:close()
print("done " .. n .. " max " .. most)
os.exit(0)
