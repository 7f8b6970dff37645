-- Contention worker (spec/11) running the old timestamp recipe of seed 004
-- (SETNX / GET / GETSET of a plain ms expiry, no server ttl), not redlock:
-- `iterations` times, under that lock, reads a counter and writes it back
-- plus one. Args: socket path, lock key, counter key, iterations.
local core = require "redlock.core"

local path, key, counter, iterations = ...
local conn = assert(core.conn { path = path })
local TIMEOUT = 20000

-- The recipe's StringUtils.isNumeric check: anything else reads as 0.
local function numeric(v)
    return type(v) == "string" and v:match("^%d+$") and tonumber(v) or 0
end

local function now() return math.floor(core.time()) end

local function lock()
    while true do
        local ts = string.format("%d", now() + TIMEOUT + 1)
        if assert(conn:command("SETNX", key, ts)) == 1 then return end
        if now() > numeric(conn:command("GET", key)) then
            if now() > numeric(conn:command("GETSET", key, ts)) then return end
        end
        core.sleep(2)
    end
end

for _ = 1, tonumber(iterations) do
    lock()
    local v = conn:command("GET", counter)
    v = tonumber(v ~= core.null and v or 0)
    core.sleep(1)
    assert(conn:command("SET", counter, tostring(v + 1)))
    -- the recipe's release: only while still within its own expiry
    if now() < numeric(conn:command("GET", key)) then conn:command("DEL", key) end
    core.sleep(3) -- other work: lets the redlock processes in between
end
conn:close()
print("done")
