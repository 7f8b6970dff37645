-- A client whose wall clock jumps (run under libfaketime, with the
-- monotonic clock left alone, as an NTP step does): writes offsets of
-- seconds to OFFSET_FILE (libfaketime's FAKETIME_TIMESTAMP_FILE, read at
-- every clock call) between steps and checks that the lock's validity
-- follows the monotonic clock. Exits 0 after printing "ok", or fails an
-- assertion naming the step.
-- usage: clock_client.lua URL KEY OFFSET_FILE
local redlock = require "redlock"
local core = require "redlock.core"

local url, key, offset_file = ...

local current = 0 -- the offset now, s
local function jump(offset)
    local before = core.time()
    local f = assert(io.open(offset_file, "w"))
    f:write(string.format("%+d", offset), "\n")
    f:close()
    -- (checked, so that a run where the clock did not move fails)
    local moved = core.time() - before
    assert(math.abs(moved - (offset - current) * 1000) < 60000, "the wall clock did not jump: " .. moved .. " ms")
    current = offset
    return moved
end

local client = redlock.new { servers = { url } }
local ttl = 10000
local lock = assert(client:acquire(key, { ttl = ttl }))
local r0 = lock:remaining()
print("jumped", jump(3600))
local r1 = lock:remaining()
assert(r1 > 0 and r1 <= r0, "forward: remaining " .. r1 .. " after " .. r0)
assert(lock:extend(), "extend after a forward jump")
local r2 = lock:remaining()
assert(r2 > 0 and r2 <= ttl, "extended: remaining " .. r2)
print("jumped", jump(-3600))
local r3 = lock:remaining()
assert(r3 > 0 and r3 <= r2, "backward: remaining " .. r3 .. " after " .. r2)
assert(lock:release(), "release after a backward jump")

-- renewal across a jump: the lock outlives its ttl, never lost
local ok, err = client:with_lock(key, { ttl = 600 }, function(l)
    jump(7200)
    core.sleep(1500)
    assert(not l:lost(), "the renewed lock was lost after a jump")
    assert(l:remaining() > 0 and l:remaining() <= 600, "renewed: remaining " .. l:remaining())
    return true
end)
assert(ok, err)
client:close()
print("ok")
