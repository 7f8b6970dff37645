-- Quickstart: locks on one Redis server, several OS processes contending.
--   lua5.4 examples/quickstart.lua [redis-url]      (make demo runs this)
local redlock = require "redlock"

local url = arg[1] or os.getenv("REDLOCK_URL") or "redis://127.0.0.1:6379"
local role, worker_id = arg[2], arg[3]

local client = redlock.new { servers = { url }, ttl = 5000, wait = 10000 }

-- The shared counter: a file all the processes read and write (on one host
-- here; the lock works the same across hosts).
local function read_counter(path)
    local f = io.open(path)
    local n = f and tonumber(f:read("*a")) or 0
    if f then f:close() end
    return n
end

local function write_counter(path, n)
    local f = assert(io.open(path, "w"))
    f:write(n, "\n")
    f:close()
end

if role == "worker" then
    -- One of several processes: five times, increment the shared counter
    -- under the lock with a read, a pause and a write: without the lock,
    -- updates would be lost.
    local path = arg[4]
    for _ = 1, 5 do
        assert(client:with_lock("demo:counter-lock", function(lock)
            local n = read_counter(path)
            os.execute("sleep 0.01")
            write_counter(path, n + 1)
            print(string.format("%.0f worker %s holds the lock (fence %.0f): counter %d -> %d",
                lock.fence, worker_id, lock.fence, n, n + 1))
        end))
    end
    client:close()
    return
end

print("redlock " .. redlock.VERSION .. " against " .. url)

-- 1. acquire, a second attempt refused, release
local lock = assert(client:acquire("demo:report"))
print(string.format("1. acquired 'demo:report': token %s..., fence %.0f, %d ms left",
    lock.token:sub(1, 8), lock.fence, lock:remaining()))
local other = redlock.new { servers = { url } }
local nope, err, code = other:try_acquire("demo:report")
assert(nope == nil and code == "locked")
print("   another client's try_acquire: " .. err)
assert(lock:release())
local theirs = assert(other:try_acquire("demo:report"))
print("   released; the other client now gets it: " .. tostring(theirs))
assert(theirs:release())
other:close()

-- 2. with_lock returns fn's results
local ok, total = client:with_lock("demo:sum", function() return 1 + 2 end)
print("2. with_lock returned " .. tostring(ok) .. ", " .. total)

-- 3. four processes, one counter
local path = os.tmpname()
write_counter(path, 0)
local interpreter = arg[-1] or "lua5.4"
print("3. four processes increment one counter five times each, under the lock")
print("   (in the order they held it, by fence token):")
local procs, lines = {}, {}
for i = 1, 4 do
    procs[i] = assert(io.popen(string.format("%s %q %q worker %d %q", interpreter, arg[0], url, i, path)))
end
for i = 1, 4 do
    for line in procs[i]:lines() do lines[#lines + 1] = line end
    procs[i]:close()
end
table.sort(lines, function(a, b) return tonumber(a:match("^%d+")) < tonumber(b:match("^%d+")) end)
for _, line in ipairs(lines) do print("   " .. line:gsub("^%d+ ", "")) end
local counter = read_counter(path)
os.remove(path)
print(string.format("   counter = %d (expected 20): %s", counter,
    counter == 20 and "no update lost" or "UPDATES LOST"))
client:close()
os.exit(counter == 20 and 0 or 1)
