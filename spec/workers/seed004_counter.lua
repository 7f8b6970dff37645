-- Contention worker (spec/11) running the old timestamp recipe of seed 004
-- (SETNX / GET / GETSET of a plain ms expiry, no server ttl), not redlock:
-- `iterations` times, under that lock, reads a counter and writes it back
-- plus one. Args: socket path, lock key, counter key, iterations [, pause]:
-- ms to sleep between GET and GETSET (a slow client: the window in which
-- another takes the lock).
local core = require "redlock.core"

local path, key, counter, iterations, pause = ...
pause = tonumber(pause) or 0
local conn = assert(core.conn { path = path })
local TIMEOUT = 20000

-- The recipe's StringUtils.isNumeric check: anything else reads as 0.
local function numeric(v)
    return type(v) == "string" and v:match("^%d+$") and tonumber(v) or 0
end

local function now() return math.floor(core.time()) end

-- The recipe as the seed explains it: SETNX; refused, GET the stored
-- expiry; a lock whose expiry has passed is taken with GETSET, owned only
-- if GETSET returned an expired value too; a live one means wait and retry.
-- A key gone between SETNX and GET (its holder released it) is free, not
-- expired: SETNX again at once. (Read as expiry 0, as a blank value, the
-- GETSET that follows could overwrite a lock taken meanwhile.)
local function lock()
    while true do
        local ts = string.format("%d", now() + TIMEOUT + 1)
        if assert(conn:command("SETNX", key, ts)) == 1 then return end
        local v = conn:command("GET", key)
        if v ~= core.null and now() > numeric(v) then
            if pause > 0 then core.sleep(pause) end
            if now() > numeric(conn:command("GETSET", key, ts)) then return end
        end
        if v ~= core.null then core.sleep(2) end
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
