--- Benchmark: the uncontended lock inside nginx. N requests, C at a time
-- (curl --parallel), each taking and releasing one lock on a key of its own
-- (distinct keys: nobody waits), over WORKERS nginx workers; requests/s of the
-- library against the same round trips sent by hand over cosockets
-- (bench/openresty/uncontended.lua): fence = false against SET NX PX and
-- the textbook compare-and-delete script, and the default (fenced) against
-- the same with the fence's XADD in the SET's write. Rows alternate within
-- each round (the order reversed every other round), in one run against
-- one redis-server and one nginx of its own (spec/openresty/nginx.lua
-- starts examples/openresty). Target (issue 37): at least 0.9x.
-- The verdict is on the median of the per-round ratios: the two rows of a
-- pair run one after the other, under the same load from the rest of the
-- machine, which changes from round to round; many short rounds (about
-- 0.15 s a row) scatter less than a few long ones.
-- One worker by default: with more, the kernel spreads curl's C
-- connections over the workers differently in every run (all on one, or
-- split), and the rounds' figures scatter by that more than by the lock.
--   make bench-nginx-uncontended   (N=1500 C=8 WORKERS=1 ROUNDS=21)
local helper = require "helper"
local nginx = require "openresty.nginx"
local core = require "redlock.core"

local format = string.format
local function env(name, default) return tonumber(os.getenv(name)) or default end
local N, C, WORKERS, ROUNDS = env("N", 1500), env("C", 8), env("WORKERS", 1), env("ROUNDS", 21)
local TARGET = 0.9

local missing = nginx.missing()
if missing then
    print("bench-nginx-uncontended: skipped: " .. missing)
    os.exit(0)
end

local redis = helper.start_server()
local server = nginx.start {
    workers = WORKERS, redis = redis, lua_path = "@REPO@/bench/openresty/?.lua;",
    server = [[location = /uncontended { content_by_lua_block { require("uncontended").run() } }]],
}

-- Where the time goes: ns on CPU so far (/proc/<pid>/schedstat's first
-- field) of the nginx workers and of the redis-server.
local workers = {}
for pid in nginx.read_cmd("ps -o pid= --ppid " .. server.pid):gmatch("%d+") do workers[#workers + 1] = pid end
local redis_pid = assert(io.open(redis.dir .. "/pid")):read("*l")
local function cpu_ns(pids)
    local sum = 0
    for _, pid in ipairs(pids) do
        local f = io.open("/proc/" .. pid .. "/schedstat")
        if f then
            sum = sum + (tonumber(f:read("*l"):match("^%d+")) or 0)
            f:close()
        end
    end
    return sum
end

-- One run of N requests: requests/s, the median µs of the lock cycle inside
-- the requests, the µs of CPU per request of the nginx workers and of the
-- redis-server, failures (and the first failure's text).
local function run(how)
    local prefix = helper.key("bench:u")
    local paths = {}
    for i = 1, N do paths[i] = format("/uncontended?how=%s&key=%s:%d", how, prefix, i) end
    local w0, r0 = cpu_ns(workers), cpu_ns({ redis_pid })
    local t0 = core.now()
    local answers = server:parallel_header(paths, C, "X-Cycle")
    local secs = (core.now() - t0) / 1000
    local w_us, r_us = (cpu_ns(workers) - w0) / N / 1000, (cpu_ns({ redis_pid }) - r0) / N / 1000
    local us, failed, why = {}, N - #answers, nil
    if failed > 0 then why = format("%d requests without an answer", failed) end
    for _, a in ipairs(answers) do
        local v = tonumber(a[2])
        if a[1] == "200" and v then
            us[#us + 1] = v
        else
            failed = failed + 1
            why = why or format("%s %s", a[1], a[2])
        end
    end
    return N / secs, helper.median(us) or 0, w_us, r_us, failed, why
end

local median = helper.median
local rows = {
    { name = "redlock, fence = false", how = "lib_unfenced" },
    { name = "floor: SET NX PX + EVALSHA", how = "floor" },
    { name = "redlock, default (fenced)", how = "lib" },
    { name = "floor + XADD in the SET's write", how = "floor_fenced" },
}
local pairs_ = {
    { rows[1], rows[2], name = "fence = false / floor" },
    { rows[3], rows[4], name = "default (fenced) / floor + XADD" },
}
for _, row in ipairs(rows) do row.rps, row.us, row.w, row.r, row.failed = {}, {}, {}, {}, 0 end
for _, p in ipairs(pairs_) do p.ratios = {} end

print(format("bench-nginx-uncontended: %d requests per row and round, %d at a time (curl --parallel), "
    .. "%d nginx worker(s), one key per request; median of %d rounds", N, C, WORKERS, ROUNDS))
for _, row in ipairs(rows) do run(row.how) end -- warm-up: pools, scripts, the JIT
for r = 1, ROUNDS do
    local from, to, step = 1, #rows, 1
    if r % 2 == 0 then from, to, step = #rows, 1, -1 end
    for i = from, to, step do -- interleaved: the machine's noise hits every row
        local row = rows[i]
        local rps, us, w, rd, failed, why = run(row.how)
        row.rps[#row.rps + 1], row.us[#row.us + 1], row.w[#row.w + 1], row.r[#row.r + 1] = rps, us, w, rd
        row.failed = row.failed + failed
        row.why = row.why or why
    end
    for _, p in ipairs(pairs_) do p.ratios[#p.ratios + 1] = p[1].rps[r] / p[2].rps[r] end
end

-- cycle: the lock's take and release inside the request (wall, under the
-- load); nginx, redis: CPU µs per request (the nginx workers': HTTP too)
print(format("%-32s %8s %8s %8s %8s %8s %8s %7s", "", "req/s", "min", "max", "cycle us", "nginx us",
    "redis us", "failed"))
local report = dofile("bench/report.lua")
report.table("nginx_uncontended", format("The uncontended lock inside nginx: %d requests per row and round,"
    .. " %d at a time, %d worker(s), a key per request; medians of %d rounds; CPU per request", N, C, WORKERS,
    ROUNDS),
    { "", "req/s", "nginx CPU", "redis CPU" })
for _, row in ipairs(rows) do
    local lo, hi = math.huge, 0
    for _, v in ipairs(row.rps) do lo, hi = math.min(lo, v), math.max(hi, v) end
    print(format("%-32s %8.0f %8.0f %8.0f %8.0f %8.1f %8.1f %7d", row.name, median(row.rps), lo, hi,
        median(row.us), median(row.w), median(row.r), row.failed))
    if row.why then print("  first failure: " .. row.why) end
    report.row("nginx_uncontended", { row.name, format("%.0f", median(row.rps)),
        format("%.1f us", median(row.w)),
        format("%.1f us", median(row.r)) })
end
for _, p in ipairs(pairs_) do
    local a, b = p[1], p[2]
    local ratio = median(p.ratios)
    local met = ratio >= TARGET and a.failed == 0 and b.failed == 0
    local each = {}
    for i, r in ipairs(p.ratios) do each[i] = format("%.2f", r) end
    print(format("ratio %s: req/s %.3fx (median of the rounds' ratios: %s; ratio of the medians %.3fx); "
        .. "cycle %.2fx, nginx CPU %.2fx, redis CPU %.2fx the floor's: %s (target >= %.2fx)", p.name, ratio,
        table.concat(each, " "), median(a.rps) / median(b.rps), median(a.us) / median(b.us),
        median(a.w) / median(b.w), median(a.r) / median(b.r), met and "met" or "NOT met", TARGET))
    report.target("nginx, uncontended: " .. p.name .. " (median of the rounds' req/s ratios)",
        format("%.2fx", ratio), format(">= %.2fx", TARGET), met, p[1].how == "lib")
end
server:stop()
helper.stop_all()
