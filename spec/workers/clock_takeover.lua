-- One try_acquire of KEY in MODE by a client whose wall clock is ahead (run
-- under libfaketime): prints "taken FENCE" or "refused CODE".
-- usage: clock_takeover.lua URL KEY MODE
local redlock = require "redlock"
local url, key, mode = ...
local client = redlock.new { servers = { url }, mode = mode }
local lock, err, code = client:try_acquire(key, { ttl = 30000 })
if lock then print("taken " .. lock.fence) else print("refused " .. tostring(code) .. " " .. tostring(err)) end
client:close()
