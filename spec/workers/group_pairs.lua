-- A worker process: n times take a group lock of two of the keys given
-- (chosen at random, in a random order), read each key's counter, write it
-- + 1, release. Prints "done <n>" and one line "<key> <times>" per key
-- taken, and exits 0 when every cycle held its lock; exits 1 on the first
-- failure, saying why.
-- usage: group_pairs.lua SERVERS N SEED KEY... (SERVERS separated by ";":
-- several make a Redlock client; the counters are on the first)
local redlock = require "redlock"
local core = require "redlock.core"
local addresses = require "redlock.addresses"

local url, n, seed = ...
local keys = { select(4, ...) }
n = tonumber(n)
math.randomseed(tonumber(seed))
local urls = {}
for u in url:gmatch("[^;]+") do urls[#urls + 1] = u end
local client = redlock.new { servers = urls, ttl = 5000, wait = 60000, retry_delay = 2, retry_jitter = 3,
    server_timeout = #urls > 1 and 500 or nil }
local data = core.conn(addresses.parse({ urls[1] })[1])
local times = {}
for i = 1, n do
    local a = math.random(#keys)
    local b = math.random(#keys - 1)
    if b >= a then b = b + 1 end
    local pair = { keys[a], keys[b] }
    local lock, err = client:acquire(pair)
    if not lock then
        io.stderr:write("cycle ", i, ": ", tostring(err), "\n")
        os.exit(1)
    end
    for _, k in ipairs(pair) do
        local counter = k .. ":counter"
        local v = data:command("GET", counter)
        v = (v == core.null) and 0 or tonumber(v)
        assert(data:command("SET", counter, tostring(v + 1)))
        times[k] = (times[k] or 0) + 1
    end
    local ok, rerr = lock:release()
    if not ok then
        io.stderr:write("cycle ", i, ": ", tostring(rerr), "\n")
        os.exit(1)
    end
end
client:close()
data:close()
print("done " .. n)
for k, t in pairs(times) do print(k .. " " .. t) end
os.exit(0)
