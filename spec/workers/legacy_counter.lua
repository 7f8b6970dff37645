-- Contention worker (spec/11): `iterations` times, under the lock, reads a
-- counter and writes it back plus one, with a separate connection and a
-- pause in between so that a second holder would lose an update.
-- Args: socket path, mode, lock key, counter key, iterations [, legacy_value].
local redlock = require "redlock"
local core = require "redlock.core"

local path, mode, key, counter, iterations, legacy_value = ...
local data = assert(core.conn { path = path })
local client = redlock.new { servers = { "unix://" .. path }, mode = mode,
    retry_delay = 5, retry_jitter = 5, legacy_value = legacy_value }

local failures = 0
for _ = 1, tonumber(iterations) do
    local ok, err = client:with_lock(key, { ttl = 20000, wait = 60000 }, function()
        local v = data:command("GET", counter)
        v = tonumber(v ~= core.null and v or 0)
        core.sleep(1)
        assert(data:command("SET", counter, tostring(v + 1)))
    end)
    if not ok then
        failures = failures + 1
        io.stderr:write(tostring(err), "\n")
    end
end
client:close()
data:close()
print("failures " .. failures)
os.exit(failures == 0 and 0 or 1)
