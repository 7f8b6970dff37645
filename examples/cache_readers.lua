-- Readers and writers: 4 reader processes read a cache file over and over
-- under read locks (shared = true), together; one writer process rebuilds
-- it twice under the write lock (a plain lock of the same key), writing it
-- in two steps with a pause between. No reader may see a half-written
-- cache, and the writer must get its turn while readers keep coming: a
-- waiting writer keeps later readers out.
--   lua5.4 examples/cache_readers.lua [redis-url]
-- Exits 0 when every read saw a whole cache and both rebuilds happened.
local redlock = require "redlock"

local url = arg[1] or os.getenv("REDLOCK_URL") or "redis://127.0.0.1:6379"
local format = string.format

local function sleep_ms(ms) os.execute(format("sleep %.3f", ms / 1000)) end

local function read_file(path)
    local f = io.open(path)
    if not f then return nil end
    local s = f:read("*a")
    f:close()
    return s
end

local function write_file(path, s)
    local f = assert(io.open(path, "w"))
    f:write(s)
    f:close()
end

if arg[2] == "reader" then
    local path, key, stop = arg[3], arg[4], arg[5]
    local client = redlock.new { servers = { url }, ttl = 5000, wait = 30000 }
    local reads, torn = 0, 0
    while not read_file(stop) do
        assert(client:with_lock(key, { shared = true }, function()
            local cache = read_file(path)
            if not cache:match("^begin %d+\n.*end %d+\n$") then torn = torn + 1 end
            sleep_ms(20)
        end))
        reads = reads + 1
    end
    print(format("reader: %d reads, %d torn", reads, torn))
    client:close()
    return
end

if arg[2] == "writer" then
    local path, key = arg[3], arg[4]
    local client = redlock.new { servers = { url }, ttl = 5000, wait = 30000 }
    for version = 2, 3 do
        sleep_ms(200)
        assert(client:with_lock(key, function(lock)
            -- two steps: a reader in between would see half a cache
            write_file(path, format("begin %d\n", version))
            sleep_ms(50)
            local f = assert(io.open(path, "a"))
            f:write(format("prices...\nend %d\n", version))
            f:close()
            return lock.fence
        end))
        print(format("writer: rebuilt version %d", version))
    end
    client:close()
    return
end

local key = format("cache:%s", redlock.token():sub(1, 8))
local path, stop = os.tmpname(), os.tmpname()
os.remove(stop)
write_file(path, "begin 1\nprices...\nend 1\n")
local interpreter = arg[-1] or "lua5.4"
local function start(role) return assert(io.popen(format("%s %q %q %s %q %q %q", interpreter, arg[0], url,
    role, path, key, stop))) end
local readers = {}
for i = 1, 4 do readers[i] = start("reader") end
local writer = start("writer")
local lines = {}
for line in writer:lines() do lines[#lines + 1] = line end
writer:close()
write_file(stop, "stop")
local torn, reads = 0, 0
for i = 1, 4 do
    for line in readers[i]:lines() do
        local r, t = line:match("(%d+) reads, (%d+) torn")
        reads, torn = reads + tonumber(r), torn + tonumber(t)
    end
    readers[i]:close()
end
for _, line in ipairs(lines) do print("  " .. line) end
print(format("reads %d, torn %d, cache now: %s", reads, torn, (read_file(path):match("^begin (%d+)"))))
local fine = torn == 0 and #lines == 2 and read_file(path):match("^begin 3\n") ~= nil
print(fine and "no reader saw a half-written cache" or "TORN reads, or a rebuild missing")
os.remove(path)
os.remove(stop)
os.exit(fine and 0 or 1)
