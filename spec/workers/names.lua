-- A worker for spec/22: N acquire/release cycles over 20 lock names (its
-- own random order), with notified waiting; every third waits only 5 ms and
-- mostly gives up. Prints "ok <taken> <gave_up>".
-- usage: names.lua URL PREFIX N
local redlock = require "redlock"
local core = require "redlock.core"

local url, prefix, n = ...
local client = redlock.new { servers = { url }, ttl = 2000, wait = 1000 }
local taken, gave_up = 0, 0
for i = 1, tonumber(n) do
    local name = prefix .. (core.random_bytes(1):byte() % 20)
    local lock, err, code = client:acquire(name, { wait = i % 3 == 0 and 5 or 1000 })
    if lock then
        taken = taken + 1
        core.sleep(1)
        assert(lock:release())
    elseif code == "timeout" then
        gave_up = gave_up + 1
    else
        error(err)
    end
end
client:close()
print("ok " .. taken .. " " .. gave_up)
