-- A pool of test databases (a counting semaphore): 6 CI jobs in separate
-- processes share 3 test databases. Each job takes a permit of
-- "test-db" with limit = 3 for the length of its run, so at most 3 run at
-- once, and the others wait for a permit (the first waiter gets the one
-- given back). The jobs count themselves in an SQLite table: the most seen
-- running at once must be 3 at most.
--
-- (SQLite through LuaSQL: Debian's lua-sql-sqlite3, or `luarocks install
-- luasql-sqlite3`; the permits are in Redis.)
--   lua5.4 examples/test_pool.lua [redis-url] [jobs]
-- Exits 0 when no more than 3 jobs ever ran at once and every job ran.
local redlock = require "redlock"
local luasql = require "luasql.sqlite3"

local url = arg[1] or os.getenv("REDLOCK_URL") or "redis://127.0.0.1:6379"
local format = string.format
local LIMIT = 3

local env = assert(luasql.sqlite3())

local function open_db(path)
    local db = assert(env:connect(path))
    assert(db:execute("PRAGMA busy_timeout = 10000")):close() -- (answers a row)
    return db
end

local function value(db, sql)
    local cur = assert(db:execute(sql))
    local v = cur:fetch()
    cur:close()
    return v
end

local function sleep_ms(ms) os.execute(format("sleep %.3f", ms / 1000)) end

if arg[2] == "job" then
    local path, key, job = arg[3], arg[4], arg[5]
    local client = redlock.new { servers = { url }, ttl = 5000, wait = 30000 }
    local db = open_db(path)
    -- with_lock renews the permit while the job runs, however long it takes
    local ok, err = client:with_lock(key, { limit = LIMIT }, function(permit)
        assert(db:execute("UPDATE pool SET running = running + 1"))
        assert(db:execute("UPDATE pool SET most = max(most, running)"))
        sleep_ms(300) -- the integration tests
        assert(db:execute("UPDATE pool SET running = running - 1, done = done + 1"))
        return permit.fence
    end)
    if not ok then
        io.stderr:write(format("job %s: %s\n", job, err))
        os.exit(1)
    end
    print(format("job %s ran", job))
    client:close()
    db:close()
    return
end

local jobs = tonumber(arg[2] or 6)
local key = format("test-db:%s", redlock.token():sub(1, 8))
local path = os.tmpname()
local db = open_db(path)
assert(db:execute("CREATE TABLE pool (running INTEGER, most INTEGER, done INTEGER)"))
assert(db:execute("INSERT INTO pool VALUES (0, 0, 0)"))
print(format("%d jobs in separate processes, %d test databases", jobs, LIMIT))

local interpreter = arg[-1] or "lua5.4"
local procs = {}
for i = 1, jobs do
    procs[i] = assert(io.popen(format("%s %q %q job %q %q %d", interpreter, arg[0], url, path, key, i)))
end
for i = 1, jobs do
    for line in procs[i]:lines() do print("  " .. line) end
    procs[i]:close()
end

local most, done = tonumber(value(db, "SELECT most FROM pool")), tonumber(value(db, "SELECT done FROM pool"))
print(format("jobs done %d, most running at once %d", done, most))
local fine = done == jobs and most <= LIMIT and most >= 1
print(fine and "never more than 3 at once" or "TOO MANY at once, or jobs missing")
db:close()
env:close()
os.remove(path)
os.exit(fine and 0 or 1)
