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
--   lua5.4 examples/once_per_window.lua [redis-url] [processes]
-- Exits 0 when each window was rebuilt exactly once.
local redlock = require "redlock"
local core = require "redlock.core"
local options = require "redlock.options"

local url = arg[1] or os.getenv("REDLOCK_URL") or "redis://127.0.0.1:6379"
local format = string.format
local WINDOW_MS = 2000      -- how long a report stays fresh
local QUERY_MS = 300        -- how long the heavy query takes

local function connect() return core.conn(options.parse_url(url)) end

-- The cache keys: the report, its freshness mark (expires after a window),
-- and a count of rebuilds so that this example can check itself.
local function keys(name)
    return { report = name .. ":report", fresh = name .. ":fresh", builds = name .. ":builds" }
end

local function heavy_query(store, k, who)
    core.sleep(QUERY_MS)
    local n = assert(store:command("INCR", k.builds))
    return format("report #%d built by process %s", n, who)
end

--- Returns the report and how this process got it: "rebuilt it", "waited for
-- the rebuild" or "found it fresh"; or nil, error message.
local function get_report(client, store, k, who)
    if store:command("EXISTS", k.fresh) == 0 then
        -- stale: one process rebuilds; wait at most the query time and then some
        local ok, how = client:with_lock(k.report .. ":lock", { ttl = QUERY_MS * 10, wait = QUERY_MS * 10 },
            function()
                if store:command("EXISTS", k.fresh) == 1 then return "waited for the rebuild" end
                local report = heavy_query(store, k, who)
                assert(store:command("SET", k.report, report))
                assert(store:command("SET", k.fresh, "1", "PX", WINDOW_MS))
                return "rebuilt it"
            end)
        if not ok then return nil, how end -- how is the error message here
        return assert(store:command("GET", k.report)), how
    end
    return assert(store:command("GET", k.report)), "found it fresh"
end

if arg[2] == "worker" then
    local name, who = arg[3], arg[4]
    local client = redlock.new { servers = { url }, retry_delay = 10, retry_jitter = 10 }
    local store = connect()
    local report, how = get_report(client, store, keys(name), who)
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
local name = "cache:" .. redlock.token():sub(1, 8)
local k = keys(name)
local store = connect()
local interpreter = arg[-1] or "lua5.4"

local function wave(label)
    print(format("%s: %d processes want the report at once", label, procs_n))
    local procs = {}
    for i = 1, procs_n do
        procs[i] = assert(io.popen(format("%s %q %q worker %q %d", interpreter, arg[0], url, name, i)))
    end
    local failed = false
    for i = 1, procs_n do
        for line in procs[i]:lines() do print("  " .. line) end
        if not procs[i]:close() then failed = true end
    end
    return not failed
end

local ok1 = wave("window 1")
local builds1 = tonumber(store:command("GET", k.builds))
local ok2 = wave("same window")
local builds2 = tonumber(store:command("GET", k.builds))
print(format("waiting %d ms for the window to pass", WINDOW_MS))
core.sleep(WINDOW_MS + 100)
local ok3 = wave("window 2")
local builds3 = tonumber(store:command("GET", k.builds))
print(format("rebuilds: %d after window 1, %d in the same window, %d after window 2",
    builds1, builds2, builds3))
local fine = ok1 and ok2 and ok3 and builds1 == 1 and builds2 == 1 and builds3 == 2
print(fine and "each window rebuilt exactly once" or "REBUILT MORE THAN ONCE PER WINDOW")
store:command("DEL", k.report, k.fresh, k.builds, "{" .. k.report .. ":lock}:fence")
store:close()
os.exit(fine and 0 or 1)
