-- Run once per window: many processes need a report that is slow to build
-- (a heavy query). The first one to find it stale rebuilds it and marks it
-- fresh for a window; the others wait for it and read the result instead of
-- running the query themselves.
--
-- The pattern (double-checked): read the "fresh" mark without the lock;
-- only when it is missing take the lock, check the mark again (another
-- process may have rebuilt the report while we waited), rebuild, then set
-- the mark with the window as its expiry. Readers never hold the lock while
-- they read, so a fresh report costs nobody a lock round trip.
--
-- The report and its mark live in an SQLite database (LuaSQL: Debian's
-- lua-sql-sqlite3, or `luarocks install luasql-sqlite3`); the lock in Redis.
--   lua5.4 examples/once_per_window.lua [redis-url] [processes]
-- Exits 0 when each window was rebuilt exactly once.
local redlock = require "redlock"
local luasql = require "luasql.sqlite3"

local url = arg[1] or os.getenv("REDLOCK_URL") or "redis://127.0.0.1:6379"
local format = string.format
local WINDOW_MS = 2000      -- how long a report stays fresh
local QUERY_MS = 300        -- how long the heavy query takes

local env = assert(luasql.sqlite3())
-- SQLite's clock, in Unix ms
local NOW_MS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"

local function open_store(path)
    local db = assert(env:connect(path))
    assert(db:execute("PRAGMA busy_timeout = 10000")):close() -- (answers a row)
    return db
end

-- The first column of the first row of a query.
local function value(db, sql)
    local cur = assert(db:execute(sql))
    local v = cur:fetch()
    cur:close()
    return v
end

local function fresh(store)
    return value(store, "SELECT count(*) FROM cache WHERE fresh_until > " .. NOW_MS) + 0 == 1
end

-- The heavy query; `builds` counts them, so that this example can check itself.
local function heavy_query(store, who)
    os.execute(format("sleep %.3f", QUERY_MS / 1000))
    assert(store:execute("UPDATE cache SET builds = builds + 1"))
    return format("report #%d built by process %s", value(store, "SELECT builds FROM cache"), who)
end

--- Returns the report and how this process got it: "rebuilt it", "waited for
-- the rebuild" or "found it fresh"; or nil, error message.
local function get_report(client, store, key, who)
    if not fresh(store) then
        -- stale: one process rebuilds; wait at most the query time and then some
        local ok, how = client:with_lock(key, { ttl = QUERY_MS * 10, wait = QUERY_MS * 10 }, function()
            if fresh(store) then return "waited for the rebuild" end
            local report = heavy_query(store, who)
            assert(store:execute(format("UPDATE cache SET report = '%s', fresh_until = %s + %d",
                store:escape(report), NOW_MS, WINDOW_MS)))
            return "rebuilt it"
        end)
        if not ok then return nil, how end -- how is the error message here
        return value(store, "SELECT report FROM cache"), how
    end
    return value(store, "SELECT report FROM cache"), "found it fresh"
end

if arg[2] == "worker" then
    local path, key, who = arg[3], arg[4], arg[5]
    local client = redlock.new { servers = { url } }
    local store = open_store(path)
    local report, how = get_report(client, store, key, who)
    if not report then
        io.stderr:write(format("process %s: %s\n", who, how))
        os.exit(1)
    end
    print(format("process %s %s: %s", who, how, report))
    client:close()
    store:close()
    return
end

local procs_n = tonumber(arg[2] or 6)
local key = "cache:" .. redlock.token():sub(1, 8) .. ":lock"
local path = os.tmpname()
local store = open_store(path)
assert(store:execute("CREATE TABLE cache (report TEXT, fresh_until INTEGER, builds INTEGER)"))
assert(store:execute("INSERT INTO cache VALUES (NULL, 0, 0)"))
local interpreter = arg[-1] or "lua5.4"

local function wave(label)
    print(format("%s: %d processes want the report at once", label, procs_n))
    local procs = {}
    for i = 1, procs_n do
        local cmd = format("%s %q %q worker %q %q %d", interpreter, arg[0], url, path, key, i)
        procs[i] = assert(io.popen(cmd))
    end
    local failed = false
    for i = 1, procs_n do
        for line in procs[i]:lines() do print("  " .. line) end
        if not procs[i]:close() then failed = true end
    end
    return not failed
end

local function builds() return tonumber(value(store, "SELECT builds FROM cache")) end
local ok1 = wave("window 1")
local builds1 = builds()
local ok2 = wave("same window")
local builds2 = builds()
print(format("waiting %d ms for the window to pass", WINDOW_MS))
os.execute(format("sleep %.3f", (WINDOW_MS + 100) / 1000))
local ok3 = wave("window 2")
local builds3 = builds()
print(format("rebuilds: %d after window 1, %d in the same window, %d after window 2",
    builds1, builds2, builds3))
local fine = ok1 and ok2 and ok3 and builds1 == 1 and builds2 == 1 and builds3 == 2
print(fine and "each window rebuilt exactly once" or "REBUILT MORE THAN ONCE PER WINDOW")
store:close()
env:close()
os.remove(path)
os.exit(fine and 0 or 1)
