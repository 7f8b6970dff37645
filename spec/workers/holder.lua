-- A holder for the partition specs: takes KEY (waiting up to WAIT ms) with
-- background renewal, then for HOLD ms writes the resource's record, one
-- line per check: "valid <t>" while the library says the lock is still its
-- own (remaining() > 0, not lost), on the monotonic clock (system-wide,
-- so comparable across processes and network namespaces); then releases.
-- Ends with "got <fence> <t>" first and "end <release result>" last.
-- usage: holder.lua SERVERS(comma-separated URLs) KEY TTL WAIT HOLD LOG
local redlock = require "redlock"
local core = require "redlock.core"

local servers_arg, key, ttl, wait, hold, log_path = ...
local servers = {}
for url in servers_arg:gmatch("[^,]+") do servers[#servers + 1] = url end
local log = assert(io.open(log_path, "w"))
local function say(...)
    log:write(table.concat({ ... }, " "), "\n")
    log:flush()
end

-- server_timeout: the Redlock fan-out's per-server limit; its default
-- (ttl/200, at least 10 ms: 10 ms for these ttls) is missed by a loaded
-- machine, and a case's outcome must not depend on the machine's speed
local client = redlock.new { servers = servers, ttl = tonumber(ttl), retry_delay = 20,
    connect_timeout = 200, timeout = 300, server_timeout = 250 }
-- An acquire ends at once on `no quorum` or `connection` (servers failed,
-- not refused: a slow machine, or the partition itself); the holder tries
-- again, as a user would, until WAIT ms have passed
local give_up = core.now() + tonumber(wait)
local lock, err, code
while true do
    lock, err, code = client:acquire(key, { renew = true, wait = math.max(0, math.floor(give_up - core.now())) })
    if lock or (code ~= "no quorum" and code ~= "connection") or core.now() >= give_up then break end
    core.sleep(20)
end
if not lock then
    say("failed", code, err)
    os.exit(0)
end
say("got", lock.fence, string.format("%.3f", core.now()))
local deadline = core.now() + tonumber(hold)
while core.now() < deadline do
    -- the resource's record, written only while the lock is ours; the
    -- time read before the check, so never later than a moment it held
    local t = core.now()
    if lock:remaining() <= 0 or lock:lost() then break end
    say("valid", string.format("%.3f", t))
    core.sleep(10)
end
local ok, rerr, rcode = lock:release()
say("end", tostring(ok), tostring(rcode), tostring(rerr))
client:close()
