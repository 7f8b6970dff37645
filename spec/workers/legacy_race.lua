-- Takeover race worker (spec/11): for each round, waits for the go, makes
-- one try_acquire of a lock the spec left expired, reports the outcome; the
-- winner waits for every worker's attempt, checks it still holds the key,
-- then releases. Args: socket path, mode, key, worker id, workers, rounds.
local redlock = require "redlock"
local core = require "redlock.core"

local path, mode, key, id, n, rounds = ...
n, rounds = tonumber(n), tonumber(rounds)
local ctl = assert(core.conn { path = path })
local client = redlock.new { servers = { "unix://" .. path }, mode = mode }

-- Counts the takeover attempts (GETSETs) this worker sends: the spec checks
-- that contenders did meet at the same expired lock.
local getsets = 0
do
    local server = client.servers[1]
    local real = server.conn
    server.conn = setmetatable({
        command = function(_, name, ...)
            if name == "GETSET" then getsets = getsets + 1 end
            return real:command(name, ...)
        end,
        -- (legacy mode's steps after the first: only on the connection open now)
        command_kept = function(_, name, ...)
            if name == "GETSET" then getsets = getsets + 1 end
            return real:command_kept(name, ...)
        end,
    }, { __index = function(_, k) return function(_, ...) return real[k](real, ...) end end })
end

local function num(k)
    local v = ctl:command("GET", k)
    return tonumber(v ~= core.null and v or 0) or 0
end

local function wait_until(pred, what)
    local t0 = core.now()
    while not pred() do
        if core.now() - t0 > 30000 then error("worker " .. id .. " stuck waiting for " .. what) end
        core.sleep(1)
    end
end

for r = 1, rounds do
    wait_until(function() return num(key .. ":round") >= r end, "round " .. r)
    -- everyone starts at the same wall-clock moment
    local go = num(key .. ":go:" .. r) - core.time()
    if go > 0 then core.sleep(go) end
    local before = getsets
    local lock, err, code = client:try_acquire(key, { ttl = 20000 })
    if getsets > before then ctl:command("INCR", key .. ":getsets:" .. r) end
    if lock then
        ctl:command("RPUSH", key .. ":won:" .. r, id .. " " .. lock.token)
    elseif code ~= "locked" then
        ctl:command("RPUSH", key .. ":err:" .. r, id .. " " .. tostring(err))
    end
    ctl:command("INCR", key .. ":tried:" .. r)
    if lock then
        wait_until(function() return num(key .. ":tried:" .. r) >= n end, "the others")
        local v = ctl:command("GET", key)
        local still = v ~= core.null and v:match(":(%x+)$") == lock.token
        local ok, rerr = lock:release()
        ctl:command("RPUSH", key .. ":released:" .. r,
            tostring(still) .. " " .. tostring(ok) .. " " .. tostring(rerr))
    end
end
client:close()
ctl:close()
print("done " .. id)
