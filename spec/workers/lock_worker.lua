-- A lock client in its own process, for specs 30-32. Prints one line per
-- event to stdout (the spec reads the worker's output file).
--   pid                                         (always first: "pid N")
--   try_at  URL KEY AT_MS          try_acquire at core.now() == AT_MS
--   hold    URL KEY TTL            acquire, print "held", sleep (for SIGKILL)
--   wait    URL KEY RETRY_DELAY WAIT [notify|poll [HOLD_MS [TTL [KIND]]]]
--                                  acquire, print "acquired T fence F valid V"
--                                  (V: lock:remaining() at T; then "handed"
--                                  when a release handed it over), hold; KIND
--                                  "limit=N" a permit, "shared" a reader
--   count   URL KEY COUNTER N      N x lock / GET / SET+1 / unlock
--   wait_long URL KEY WAIT         as wait (notified), but a BLPOP lasts up to
--                                  WAIT (notify.RECHECK_MS raised), and the
--                                  lock is released at once ("acquired fence
--                                  F", then "handed" as for wait)
if arg[1] == "wait_long" then require("redlock.notify").RECHECK_MS = tonumber(arg[4]) end
local redlock = require "redlock"
local core = require "redlock.core"

local mode, url, key = arg[1], arg[2], arg[3]

-- whether the last acquire was handed the lock (the acquired event)
local handed = ""
local function on_event(ev)
    if ev.type == "acquired" then handed = ev.handed and "handed" or "" end
end

local function say(...)
    io.stdout:write(table.concat({ ... }, " "), "\n")
    io.stdout:flush()
end

local f = io.open("/proc/self/stat")
say("pid", f:read("*l"):match("^(%d+)"))
f:close()

if mode == "try_at" then
    local client = redlock.new { servers = { url } }
    local at = tonumber(arg[4])
    core.sleep(at - core.now())
    local lock, _, code = client:try_acquire(key)
    say(lock and "acquired" or code)
    if lock then lock:release() end
    client:close()
elseif mode == "hold" then
    local client = redlock.new { servers = { url } }
    assert(client:acquire(key, { ttl = tonumber(arg[4]) }))
    say("held")
    core.sleep(60000)
elseif mode == "wait" then
    local client = redlock.new { servers = { url } }
    local lock, err = client:acquire(key, {
        retry_delay = tonumber(arg[4]), retry_jitter = 0, wait = tonumber(arg[5]),
        notify = arg[6] ~= "poll", ttl = tonumber(arg[8]),
        limit = tonumber((arg[9] or ""):match("^limit=(%d+)$")), shared = arg[9] == "shared" or nil,
        on_event = on_event,
    })
    if not lock then
        say("failed", err)
        os.exit(1)
    end
    local t = core.now()
    say("acquired", string.format("%.3f", t), "fence", lock.fence, "valid", string.format("%.3f", lock:remaining()),
        handed)
    if arg[7] then core.sleep(tonumber(arg[7])) end
    lock:release()
    client:close()
elseif mode == "wait_long" then
    local client = redlock.new { servers = { url } }
    local lock, err = client:acquire(key, { wait = tonumber(arg[4]), on_event = on_event })
    if not lock then
        say("failed", err)
        os.exit(1)
    end
    say("acquired", "fence", lock.fence, handed)
    assert(lock:release())
    client:close()
elseif mode == "count" then
    local client = redlock.new { servers = { url } }
    local data = core.conn { host = url:match("//([^:/]+)"), port = tonumber(url:match(":(%d+)$")) }
    for _ = 1, tonumber(arg[5]) do
        local lock = assert(client:acquire(key, { wait = 30000 }))
        local v = tonumber(data:command("GET", arg[4])) or 0 -- core.null when unset
        assert(data:command("SET", arg[4], v + 1))
        assert(lock:release())
    end
    say("done")
    client:close()
else
    error("unknown mode " .. tostring(mode))
end
