-- Group locks: 4 processes move stock between random pairs of 4 SKUs, each
-- move under the locks of both SKUs at once (a list of keys), whatever the
-- order it names them in: no deadlock, and no move lost. A move reads both
-- stocks, pauses, and writes both back: without both locks two moves
-- would overwrite each other and the total would change.
--
-- (SQLite through LuaSQL: Debian's lua-sql-sqlite3, or `luarocks install
-- luasql-sqlite3`; the locks are in Redis.)
--   lua5.4 examples/move_stock.lua [redis-url] [moves per process]
-- Exits 0 when the total stock is what it was and every move ran.
local redlock = require "redlock"
local luasql = require "luasql.sqlite3"

local url = arg[1] or os.getenv("REDLOCK_URL") or "redis://127.0.0.1:6379"
local format = string.format
local SKUS = { "sku-1", "sku-2", "sku-3", "sku-4" }

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

if arg[2] == "mover" then
    local path, prefix, moves, seed = arg[3], arg[4], tonumber(arg[5]), tonumber(arg[6])
    math.randomseed(seed)
    local client = redlock.new { servers = { url }, ttl = 5000, wait = 30000, retry_delay = 5,
        retry_jitter = 5 }
    local db = open_db(path)
    for _ = 1, moves do
        local a = math.random(#SKUS)
        local b = (a + math.random(#SKUS - 1) - 1) % #SKUS + 1
        local from, to = SKUS[a], SKUS[b]
        local ok, err = client:with_lock({ prefix .. from, prefix .. to }, function()
            local qa = tonumber(value(db, format("SELECT qty FROM stock WHERE sku = '%s'", from)))
            local qb = tonumber(value(db, format("SELECT qty FROM stock WHERE sku = '%s'", to)))
            local n = math.min(qa, math.random(5))
            sleep_ms(2) -- the window a lost update needs
            assert(db:execute(format("UPDATE stock SET qty = %d WHERE sku = '%s'", qa - n, from)))
            assert(db:execute(format("UPDATE stock SET qty = %d WHERE sku = '%s'", qb + n, to)))
            assert(db:execute("UPDATE moves SET n = n + 1"))
        end)
        if not ok then
            io.stderr:write(format("mover: %s\n", err))
            os.exit(1)
        end
    end
    print(format("mover: %d moves", moves))
    client:close()
    db:close()
    return
end

local moves = tonumber(arg[2] or 25)
local prefix = format("stock:%s:", redlock.token():sub(1, 8))
local path = os.tmpname()
local db = open_db(path)
assert(db:execute("CREATE TABLE stock (sku TEXT, qty INTEGER)"))
for _, sku in ipairs(SKUS) do assert(db:execute(format("INSERT INTO stock VALUES ('%s', 100)", sku))) end
assert(db:execute("CREATE TABLE moves (n INTEGER)"))
assert(db:execute("INSERT INTO moves VALUES (0)"))
print(format("4 processes x %d moves between random pairs of %d SKUs", moves, #SKUS))

local interpreter = arg[-1] or "lua5.4"
local procs = {}
for i = 1, 4 do
    procs[i] = assert(io.popen(format("%s %q %q mover %q %q %d %d", interpreter, arg[0], url, path, prefix,
        moves, 1000 + i)))
end
for i = 1, 4 do
    for line in procs[i]:lines() do print("  " .. line) end
    procs[i]:close()
end
local total = tonumber(value(db, "SELECT sum(qty) FROM stock"))
local done = tonumber(value(db, "SELECT n FROM moves"))
local lowest = tonumber(value(db, "SELECT min(qty) FROM stock"))
print(format("moves %d, total stock %d (was 400), lowest %d", done, total, lowest))
local fine = total == 400 and done == 4 * moves and lowest >= 0
print(fine and "no move lost" or "LOST a move, or stock went negative")
db:close()
env:close()
os.remove(path)
os.exit(fine and 0 or 1)
