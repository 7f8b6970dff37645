-- Worker for spec/20-redlock_spec.lua: increments a counter n times with a
-- read-modify-write (GET, pause, SET) under a Redlock lock over the servers
-- given. Exits 0 and prints "done" when all went well.
--   lua 20-redlock_worker.lua KEY N URL,URL,... COUNTER_URL
local redlock = require "redlock"
local core = require "redlock.core"
local addresses = require "redlock.addresses"

local key, n, urls, counter_url = arg[1], tonumber(arg[2]), arg[3], arg[4]
local servers = {}
for url in urls:gmatch("[^,]+") do servers[#servers + 1] = url end

local client = redlock.new {
    servers = servers,
    ttl = 5000,
    wait = 30000,
    retry_delay = 5,
    retry_jitter = 20,
    server_timeout = 500, -- a busy test host must not fail the run
}
local data = core.conn(addresses.parse_url(counter_url))
local counter = key .. ":counter"

for i = 1, n do
    local ok, err = client:with_lock(key, function()
        local v = data:command("GET", counter)
        v = v == core.null and 0 or tonumber(v)
        core.sleep(1) -- widen the window a lost update would need
        assert(data:command("SET", counter, v + 1))
    end)
    if not ok then
        io.stderr:write("iteration ", i, ": ", tostring(err), "\n")
        os.exit(1)
    end
end
client:close()
print("done")
