--- A Redlock waiter in its own process (spec/26): acquires KEY over the
-- servers given, waiting up to WAIT ms, with a retry_delay of a minute and
-- notify.RECHECK_MS raised to RECHECK, so that only a release's wake-up
-- gets it the lock within WAIT. Prints "acquired FENCE" or the error.
--   lua redlock_waiter.lua URL,URL,... KEY WAIT RECHECK
local notify = require "redlock.notify"
notify.RECHECK_MS = tonumber(arg[4])
local redlock = require "redlock"

local servers = {}
for url in arg[1]:gmatch("[^,]+") do servers[#servers + 1] = url end
local client = redlock.new { servers = servers, retry_delay = 60000, retry_jitter = 0, server_timeout = 500 }
local lock, err = client:acquire(arg[2], { wait = tonumber(arg[3]) })
print(lock and ("acquired " .. lock.fence) or err)
if lock then lock:release() end
client:close()
