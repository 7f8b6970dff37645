-- Flash sale ("seckill"): N buyers in separate processes race for M items,
-- each buyer wanting up to 2. Each purchase reads the stock, checks it,
-- writes it back less one and records the order: a read-modify-write that,
-- without the lock, sells the last item twice. Under the lock the stock
-- never goes below zero and there are exactly M orders.
--   lua5.4 examples/flash_sale.lua [redis-url] [buyers] [items]
-- Exits 0 when nothing was oversold.
local redlock = require "redlock"
local core = require "redlock.core"
local options = require "redlock.options"

local url = arg[1] or os.getenv("REDLOCK_URL") or "redis://127.0.0.1:6379"
local format = string.format

-- The shop's own data, on a plain connection (any Redis client would do).
local function connect() return core.conn(options.parse_url(url)) end

if arg[2] == "buyer" then
    local sale, buyer = arg[3], arg[4]
    local client = redlock.new { servers = { url }, ttl = 2000, wait = 10000,
        retry_delay = 5, retry_jitter = 5 }
    local shop = connect()
    -- wait for the sale to open, so that every buyer starts together
    assert(shop:command("INCR", sale .. ":ready"))
    for _ = 1, 2000 do
        if shop:command("EXISTS", sale .. ":open") == 1 then break end
        core.sleep(5)
    end
    local bought = 0
    while bought < 2 do
        -- One lock per item on sale; fn returns what happened.
        local ok, result = client:with_lock(sale .. ":lock", function()
            local stock = tonumber(assert(shop:command("GET", sale .. ":stock")))
            if stock <= 0 then return "sold out" end
            core.sleep(2) -- checking the payment: the window a race needs
            assert(shop:command("SET", sale .. ":stock", stock - 1))
            assert(shop:command("RPUSH", sale .. ":orders", buyer))
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
local sale = format("sale:%s", redlock.token():sub(1, 8))
local shop = connect()
assert(shop:command("SET", sale .. ":stock", items))
print(format("flash sale %s: %d items, %d buyers in separate processes", sale, items, buyers))

local interpreter = arg[-1] or "lua5.4"
local procs = {}
for i = 1, buyers do
    procs[i] = assert(io.popen(format("%s %q %q buyer %q %d", interpreter, arg[0], url, sale, i)))
end
for _ = 1, 2000 do -- at most 10 s for the buyers to start
    if tonumber(shop:command("GET", sale .. ":ready")) == buyers then break end
    core.sleep(5)
end
assert(shop:command("SET", sale .. ":open", "1"))
local total = 0
for i = 1, buyers do
    for line in procs[i]:lines() do
        print("  " .. line)
        total = total + (tonumber(line:match("bought (%d+)")) or 0)
    end
    procs[i]:close()
end

local stock = tonumber(assert(shop:command("GET", sale .. ":stock")))
local orders = assert(shop:command("LLEN", sale .. ":orders"))
print(format("stock left %d, orders %d, buyers report %d bought", stock, orders, total))
local fine = stock == 0 and orders == items and total == items
print(fine and "never oversold" or "OVERSOLD or lost orders")
-- the lock's fence counter has no ttl: delete it with the sale
shop:command("DEL", sale .. ":stock", sale .. ":orders", sale .. ":ready", sale .. ":open",
    "{" .. sale .. ":lock}:fence")
shop:close()
os.exit(fine and 0 or 1)
