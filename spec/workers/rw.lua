-- A worker process: n times with_lock as a reader (ROLE "r", shared =
-- true) or a writer (ROLE "w"); inside, INCR its role's counter, check
-- the other role's (and for a writer its own) is what exclusion allows,
-- hold HOLD_MS, DECR. Prints "done <n> most <readers seen at once>" and
-- exits 0; exits 1 on the first overlap or failure, saying why. With N 0
-- it loops until the key STOP exists.
-- usage: rw.lua SERVERS KEY ROLE N HOLD_MS [STOP] (SERVERS: comma-separated,
-- several make a Redlock client; the counters are on the first)
local redlock = require "redlock"
local core = require "redlock.core"
local addresses = require "redlock.addresses"

local url, key, role, n, hold, stop = ...
n, hold = tonumber(n), tonumber(hold)
local urls = {}
for u in url:gmatch("[^,]+") do urls[#urls + 1] = u end
-- (a Redlock's answers may take longer than the default 25 ms on a busy host)
local client = redlock.new { servers = urls, ttl = 5000, wait = 60000, retry_delay = 5, retry_jitter = 5,
    server_timeout = #urls > 1 and 500 or nil }
local data = core.conn(addresses.parse({ urls[1] })[1])
local readers, writers = key .. ":readers", key .. ":writers"
local most, i = 0, 0
local function fail(...)
    io.stderr:write("cycle ", i, ": ", ...)
    io.stderr:write("\n")
    os.exit(1)
end
while true do
    i = i + 1
    if n > 0 and i > n then break end
    if n == 0 and data:command("EXISTS", stop) == 1 then break end
    local ok, err = client:with_lock(key, { shared = role == "r" }, function()
        if role == "r" then
            local r = data:command("INCR", readers)
            if r > most then most = r end
            if (tonumber(data:command("GET", writers)) or 0) > 0 then fail("a writer inside with a reader") end
            core.sleep(hold)
            data:command("DECR", readers)
        else
            local w = data:command("INCR", writers)
            if w ~= 1 then fail("two writers inside") end
            if (tonumber(data:command("GET", readers)) or 0) > 0 then fail("readers inside with a writer") end
            core.sleep(hold)
            data:command("DECR", writers)
        end
    end)
    if not ok then fail(tostring(err)) end
end
client:close()
data:close()
print("done " .. (i - 1) .. " most " .. most)
os.exit(0)
