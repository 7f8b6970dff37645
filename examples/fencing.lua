-- Fencing tokens: why a TTL lock alone cannot stop a paused holder, and how
-- the protected store stops it instead.
--
-- Process A takes the lock (ttl 500 ms) and then pauses for 1.5 s, as a
-- long GC pause, swapping or a stopped VM would make it. Its lock expires;
-- process B takes the lock, with a larger fence, and writes. Then A wakes
-- up, still believing it holds the lock, and writes too. The toy store
-- keeps the largest fence it has seen and refuses writes with a smaller
-- one, so A's late write is rejected and B's value stays.
--   lua5.4 examples/fencing.lua [redis-url]
-- Exits 0 when the stale write was rejected.
local redlock = require "redlock"
local core = require "redlock.core"
local options = require "redlock.options"

local url = arg[1] or os.getenv("REDLOCK_URL") or "redis://127.0.0.1:6379"
local format = string.format
local TTL_MS, PAUSE_MS = 500, 1500

-- The toy store: a value and the largest fence that wrote it, changed only
-- by one atomic script. Any store can do the same check: a SQL
-- `UPDATE ... WHERE fence < ?`, a file store comparing a header, ...
local STORE_WRITE = [[
local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) < seen then
  return redis.error_reply('stale fence ' .. ARGV[2] .. ': this store has seen ' .. seen)
end
redis.call('SET', KEYS[2], ARGV[2])
return redis.call('SET', KEYS[1], ARGV[1])
]]

local Store = {}
Store.__index = Store

local function open_store(name)
    return setmetatable({ conn = core.conn(options.parse_url(url)), data = name .. ":data",
        fence = name .. ":fence-seen" }, Store)
end

--- Writes value with the writer's fence; true, or nil and the store's refusal.
function Store:write(value, fence)
    return self.conn:command("EVAL", STORE_WRITE, 2, self.data, self.fence, value, fence)
end

function Store:read() return self.conn:command("GET", self.data) end

local name, role = arg[3], arg[2]

if role == "A" then
    local client = redlock.new { servers = { url }, ttl = TTL_MS }
    local store = open_store(name)
    local lock = assert(client:acquire(name .. ":lock"))
    print(format("A: took the lock, fence %d, %d ms left", lock.fence, lock:remaining()))
    io.stdout:flush()
    -- Checking lock:remaining() before writing would not help: the pause can
    -- fall between the check and the write, as it does here.
    core.sleep(PAUSE_MS) -- the pause: A is not running, its lock expires
    print(format("A: woke up after %d ms, %d ms left as A knows it; writing anyway", PAUSE_MS,
        lock:remaining()))
    local ok, err = store:write("written by A", lock.fence)
    print("A: store answered: " .. (ok and "OK" or err))
    local released, rerr = lock:release()
    print("A: release: " .. (released and "OK" or rerr))
    client:close()
    os.exit(ok and 1 or 0) -- A's write must have been refused
end

name = "fencing:" .. redlock.token():sub(1, 8)
local store = open_store(name)
local interpreter = arg[-1] or "lua5.4"
local a = assert(io.popen(format("%s %q %q A %q", interpreter, arg[0], url, name)))

-- B starts once A holds the lock
local first = a:read("*l")
print(first)
local client = redlock.new { servers = { url }, ttl = 5000, wait = 5000 }
local lock, err = client:acquire(name .. ":lock")
if not lock then
    print("B: " .. err)
    os.exit(1)
end
print(format("B: took the lock after A's expired, fence %d", lock.fence))
print("B: store answered: " .. tostring(assert(store:write("written by B", lock.fence))))
assert(lock:release())

for line in a:lines() do print(line) end
local a_refused = a:close()
local value = store:read()
print(format("store holds %q", tostring(value)))
local fine = a_refused and value == "written by B"
print(fine and "the paused holder's late write was rejected" or "THE STALE WRITE GOT THROUGH")
store.conn:command("DEL", store.data, store.fence, "{" .. name .. ":lock}:fence")
store.conn:close()
client:close()
os.exit(fine and 0 or 1)
