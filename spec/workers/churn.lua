-- A worker for the safety invariant under churn: until `duration` ms have
-- passed, take the lock, read-modify-write a counter on a separate data
-- server, release. Servers may be restarted meanwhile: failures are counted
-- and retried. Writes one line per hold to LOG:
--   <t_got> <t_checked> <confirmed 0|1> <counted 0|1>
-- on the monotonic clock (system-wide, so comparable across processes).
-- t_got: acquire returned; t_checked: after the write, when remaining() was
-- read; counted: the library still reported the lock valid then, so the
-- hold [t_got, t_checked] was reported as held throughout; confirmed:
-- release returned true.
-- usage: churn.lua SERVERS LOCK_KEY DATA_URL COUNTER_KEY DURATION_MS MODE LOG
local redlock = require "redlock"
local core = require "redlock.core"
local addresses = require "redlock.addresses"

local servers_arg, lock_key, data_url, counter_key, duration, mode, log_path = ...
local servers = {}
for url in servers_arg:gmatch("[^,]+") do servers[#servers + 1] = url end

-- (server_timeout: the connection's, not the 15 ms a 3 s ttl gives: on a
-- loaded host round trips past that failed most attempts on every server)
local client = redlock.new { servers = servers, ttl = 3000, wait = 2000, retry_delay = 5,
    retry_jitter = 10, mode = mode, connect_timeout = 200, timeout = 300, server_timeout = 300 }
local data = core.conn(addresses.parse_url(data_url))
local log = assert(io.open(log_path, "w"))
local deadline = core.now() + tonumber(duration)
local holds, failures = 0, 0

while core.now() < deadline do
    local lock = client:acquire(lock_key)
    if not lock then
        failures = failures + 1
        core.sleep(20)
    else
        local t_got = core.now()
        local counted = 0
        if lock:remaining() > 1000 then
            local v = data:command("GET", counter_key)
            v = (v == core.null) and 0 or tonumber(v)
            core.sleep(2) -- widens the window in which a second holder would lose an update
            assert(data:command("SET", counter_key, tostring(v + 1)))
            if lock:remaining() > 0 then counted = 1 end
        end
        local t_checked = core.now()
        local ok = lock:release()
        log:write(string.format("%.3f %.3f %d %d\n", t_got, t_checked, ok and 1 or 0, counted))
        holds = holds + 1
    end
end
log:close()
client:close()
data:close()
print(string.format("holds %d failures %d", holds, failures))
os.exit(0)
