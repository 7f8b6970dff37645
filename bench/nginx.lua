--- Benchmark: contention inside nginx. N requests on one key, C at a time
-- (curl --parallel), each holding the lock HOLD_MS (ngx.sleep) over 4
-- workers: requests/s and the wait for the lock (p50, p99, max), for the
-- default client (a release wakes a waiter through its worker's
-- subscriber, redlock.ngx_wait) and for notify = false (polling with the
-- default retry_delay), in the same run, against one redis-server and one
-- nginx of its own (spec/openresty/nginx.lua starts examples/openresty).
-- LIMIT=L: the requests take permits of a semaphore of L instead.
--   make bench-nginx     (N=400 C=20 HOLD_MS=3 ROUNDS=3 [LIMIT=L])
local helper = require "helper"
local nginx = require "openresty.nginx"
local core = require "redlock.core"

local format = string.format
local function env(name, default) return tonumber(os.getenv(name)) or default end
local N, C, HOLD_MS, ROUNDS = env("N", 400), env("C", 20), env("HOLD_MS", 3), env("ROUNDS", 3)
local LIMIT = env("LIMIT", nil)

local missing = nginx.missing()
if missing then
    print("bench-nginx: skipped: " .. missing)
    os.exit(0)
end

local redis = helper.start_server()
local server = nginx.start {
    workers = 4, redis = redis, lua_path = "@REPO@/bench/openresty/?.lua;",
    server = [[location = /contend { content_by_lua_block { require("contend").contend() } }]],
}

local function percentile(sorted, p)
    return sorted[math.max(1, math.ceil(#sorted * p))]
end

-- One run: requests/s, waits (sorted), failures.
local function run(notify)
    local key = helper.key("bench")
    local paths = {}
    for i = 1, N do
        paths[i] = format("/contend?key=%s&notify=%d&ms=%d&i=%d%s", key, notify and 1 or 0, HOLD_MS, i,
            LIMIT and "&limit=" .. LIMIT or "")
    end
    local t0 = core.now()
    local codes, bodies = server:parallel(paths, C)
    local secs = (core.now() - t0) / 1000
    local waits, failed, held = {}, 0, 0
    for i = 1, N do
        local waited, h = (bodies[i] or ""):match("^(%S+) (%S+)")
        if codes[i] == "200" and tonumber(waited) then
            waits[#waits + 1] = tonumber(waited)
            held = held + tonumber(h)
        else
            failed = failed + 1
        end
    end
    table.sort(waits)
    -- the serial limit: one hold after another (LIMIT at once), as long as
    -- ngx.sleep's holds really took in this run
    return N / secs, waits, failed, #waits > 0 and 1000 * #waits * (LIMIT or 1) / held or 0
end

local median = helper.median

print(format("bench-nginx: %d requests on one key, %d at a time, 4 workers, %d ms under %s; "
    .. "median of %d rounds", N, C, HOLD_MS, LIMIT and format("a permit of %d", LIMIT) or "the lock", ROUNDS))
local rows = {
    { name = "default (notified)", notify = true },
    { name = "notify = false (polling)", notify = false },
}
for _, row in ipairs(rows) do
    row.rps, row.p50, row.p99, row.max, row.limit, row.failed = {}, {}, {}, {}, {}, 0
end
run(true) -- warm-up: connections, the workers' subscribers
for _ = 1, ROUNDS do
    for _, row in ipairs(rows) do -- interleaved: the machine's noise hits both
        local rps, waits, failed, limit = run(row.notify)
        row.rps[#row.rps + 1] = rps
        row.limit[#row.limit + 1] = limit
        row.p50[#row.p50 + 1] = percentile(waits, 0.5) or 0
        row.p99[#row.p99 + 1] = percentile(waits, 0.99) or 0
        row.max[#row.max + 1] = waits[#waits] or 0
        row.failed = row.failed + failed
    end
end
print(format("%-26s %10s %10s %10s %10s %8s", "", "req/s", "wait p50", "wait p99", "wait max", "failed"))
for _, row in ipairs(rows) do
    print(format("%-26s %10.0f %8.1fms %8.1fms %8.1fms %8d", row.name, median(row.rps), median(row.p50),
        median(row.p99), median(row.max), row.failed))
end
print(format("ratio default / notify = false: req/s %.2fx, wait p99 %.2fx",
    median(rows[1].rps) / median(rows[2].rps), median(rows[1].p99) / median(rows[2].p99)))
-- against the ideals: a FIFO queue of C requests each holding HOLD_MS
-- waits about C x HOLD_MS (/ LIMIT); one hold after another serves 1000 /
-- HOLD_MS requests/s (x LIMIT) (nominal), or 1000 / the mean hold
-- ngx.sleep really gave
local fifo = C * HOLD_MS / (LIMIT or 1)
for _, row in ipairs(rows) do
    print(format("%-26s wait p99 %.2fx and max %.2fx the FIFO ideal (%.0f ms); req/s %.2fx the serial limit "
        .. "(%.0f/s measured, %.2fx the nominal %.0f/s)", row.name, median(row.p99) / fifo,
        median(row.max) / fifo, fifo, median(row.rps) / median(row.limit), median(row.limit),
        median(row.rps) / (1000 * (LIMIT or 1) / HOLD_MS), 1000 * (LIMIT or 1) / HOLD_MS))
end
server:stop()
helper.stop_all()
