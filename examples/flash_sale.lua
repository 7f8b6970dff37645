-- Flash sale ("seckill"): N buyers in separate processes race for M items,
-- each buyer wanting up to 2. Each purchase reads the stock, checks it,
-- writes it back less one and records the order: a read-modify-write that,
-- without the lock, sells the last item twice. Under the lock the stock
-- never goes below zero and there are exactly M orders.
--
-- The shop's data is an SQLite database (LuaSQL: Debian's lua-sql-sqlite3,
-- or `luarocks install luasql-sqlite3`); the lock is in Redis.
--   lua5.4 examples/flash_sale.lua [redis-url] [buyers] [items]
-- Exits 0 when nothing was oversold.
local redlock = require "redlock"
local luasql = require "luasql.sqlite3"

local url = arg[1] or os.getenv("REDLOCK_URL") or "redis://127.0.0.1:6379"
local format = string.format

local env = assert(luasql.sqlite3())

local function open_shop(path)
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

local function sleep_ms(ms) os.execute(format("sleep %.3f", ms / 1000)) end

if arg[2] == "buyer" then
    local path, key, buyer = arg[3], arg[4], arg[5]
    local client = redlock.new { servers = { url }, ttl = 2000, wait = 10000 }
    local shop = open_shop(path)
    -- wait for the sale to open, so that every buyer starts together
    assert(shop:execute("UPDATE sale SET ready = ready + 1"))
    for _ = 1, 2000 do
        if tonumber(value(shop, "SELECT open FROM sale")) == 1 then break end
        sleep_ms(5)
    end
    local bought = 0
    while bought < 2 do
        -- One lock per item on sale; fn returns what happened.
        local ok, result = client:with_lock(key, function()
            local stock = tonumber(value(shop, "SELECT stock FROM sale"))
            if stock <= 0 then return "sold out" end
            sleep_ms(2) -- checking the payment: the window a race needs
            assert(shop:execute(format("UPDATE sale SET stock = %d", stock - 1)))
            assert(shop:execute(format("INSERT INTO orders VALUES (%d)", tonumber(buyer))))
            return "bought"
        end)
        if not ok then
            io.stderr:write(format("buyer %s: %s\n", buyer, result))
            os.exit(1)
        end
        if result == "sold out" then break end
        bought = bought + 1
    end
    print(format("buyer %s bought %d", buyer, bought))
    client:close()
    shop:close()
    return
end

local buyers = tonumber(arg[2] or 8)
local items = tonumber(arg[3] or 12)
local key = format("sale:%s:lock", redlock.token():sub(1, 8))
local path = os.tmpname()
local shop = open_shop(path)
assert(shop:execute("CREATE TABLE sale (stock INTEGER, ready INTEGER, open INTEGER)"))
assert(shop:execute(format("INSERT INTO sale VALUES (%d, 0, 0)", items)))
assert(shop:execute("CREATE TABLE orders (buyer INTEGER)"))
print(format("flash sale: %d items, %d buyers in separate processes", items, buyers))

local interpreter = arg[-1] or "lua5.4"
local procs = {}
for i = 1, buyers do
    procs[i] = assert(io.popen(format("%s %q %q buyer %q %q %d", interpreter, arg[0], url, path, key, i)))
end
for _ = 1, 2000 do -- at most 10 s for the buyers to start
    if tonumber(value(shop, "SELECT ready FROM sale")) == buyers then break end
    sleep_ms(5)
end
assert(shop:execute("UPDATE sale SET open = 1"))
local total = 0
for i = 1, buyers do
    for line in procs[i]:lines() do
        print("  " .. line)
        total = total + (tonumber(line:match("bought (%d+)")) or 0)
    end
    procs[i]:close()
end

local stock = tonumber(value(shop, "SELECT stock FROM sale"))
local orders = tonumber(value(shop, "SELECT count(*) FROM orders"))
print(format("stock left %d, orders %d, buyers report %d bought", stock, orders, total))
local fine = stock == 0 and orders == items and total == items
print(fine and "never oversold" or "OVERSOLD or lost orders")
shop:close()
env:close()
os.remove(path)
os.exit(fine and 0 or 1)
