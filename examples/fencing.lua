-- Fencing tokens: why a TTL lock alone cannot stop a paused holder, and how
-- the protected store stops it instead.
--
-- Process A takes the lock (ttl 500 ms) and then pauses for 1.5 s, as a
-- long GC pause, swapping or a stopped VM would make it. Its lock expires;
-- process B takes the lock, with a larger fence, and writes. Then A wakes
-- up, still believing it holds the lock, and writes too. The store, an
-- SQLite table (LuaSQL: Debian's lua-sql-sqlite3, or `luarocks install
-- luasql-sqlite3`), keeps the fence of the last write in the row and
-- refuses a write with a smaller one, so A's late write is rejected and B's
-- value stays.
--   lua5.4 examples/fencing.lua [redis-url]
-- Exits 0 when the stale write was rejected.
local redlock = require "redlock"
local luasql = require "luasql.sqlite3"

local url = arg[1] or os.getenv("REDLOCK_URL") or "redis://127.0.0.1:6379"
local format = string.format
local TTL_MS, PAUSE_S = 500, 1.5

local env = assert(luasql.sqlite3())

local function open_store(path)
    local db = assert(env:connect(path))
    local cur = assert(db:execute("PRAGMA busy_timeout = 5000")) -- (answers a row)
    cur:close()
    return db
end

-- The resource's check: write only if this fence is at least the last one
-- written (the same holder may write again), in the same statement as the
-- write, and count the rows: 0 means a newer holder has written.
-- (%.0f: every digit of the fence, in any Lua; never tostring in 5.1.)
local function write(db, value, fence)
    local f = format("%.0f", fence)
    local n = assert(db:execute(format(
        "UPDATE doc SET body = '%s', fence = %s WHERE id = 'report' AND fence <= %s",
        db:escape(value), f, f)))
    if n == 1 then return true end
    local cur = assert(db:execute("SELECT fence FROM doc WHERE id = 'report'"))
    local seen = cur:fetch()
    cur:close()
    return nil, format("stale fence %s: this store has seen %s", f, format("%.0f", seen))
end

local function read(db)
    local cur = assert(db:execute("SELECT body FROM doc WHERE id = 'report'"))
    local body = cur:fetch()
    cur:close()
    return body
end

local role, path, key = arg[2], arg[3], arg[4]

if role == "A" then
    local client = redlock.new { servers = { url }, ttl = TTL_MS }
    local db = open_store(path)
    local lock = assert(client:acquire(key))
    print(format("A: took the lock, fence %.0f, %d ms left", lock.fence, lock:remaining()))
    io.stdout:flush()
    -- Checking lock:remaining() before writing would not help: the pause can
    -- fall between the check and the write, as it does here.
    os.execute(format("sleep %.1f", PAUSE_S)) -- the pause: A's lock expires
    print(format("A: woke up after %.1f s, %d ms left as A knows it; writing anyway", PAUSE_S,
        lock:remaining()))
    local ok, err = write(db, "written by A", lock.fence)
    print("A: store answered: " .. (ok and "OK" or err))
    local released, rerr = lock:release()
    print("A: release: " .. (released and "OK" or rerr))
    db:close()
    client:close()
    os.exit(ok and 1 or 0) -- A's write must have been refused
end

path = os.tmpname()
key = "fencing:" .. redlock.token():sub(1, 8)
local db = open_store(path)
assert(db:execute("CREATE TABLE doc (id TEXT PRIMARY KEY, body TEXT, fence INTEGER NOT NULL)"))
assert(db:execute("INSERT INTO doc VALUES ('report', 'empty', 0)"))
local interpreter = arg[-1] or "lua5.4"
local a = assert(io.popen(format("%s %q %q A %q %q", interpreter, arg[0], url, path, key)))

-- B starts once A holds the lock
print(a:read("*l"))
local client = redlock.new { servers = { url }, ttl = 5000, wait = 5000 }
local lock, err = client:acquire(key)
if not lock then
    print("B: " .. err)
    os.exit(1)
end
print(format("B: took the lock after A's expired, fence %.0f", lock.fence))
print("B: store answered: " .. tostring(assert(write(db, "written by B", lock.fence))))
assert(lock:release())

for line in a:lines() do print(line) end
local a_refused = a:close()
local value = read(db)
print(format("store holds %q", tostring(value)))
local fine = a_refused and value == "written by B"
print(fine and "the paused holder's late write was rejected" or "THE STALE WRITE GOT THROUGH")
db:close()
env:close()
os.remove(path)
client:close()
os.exit(fine and 0 or 1)
