-- Metrics and events: a Prometheus text export of client:stats(), and one
-- log line per lost lock from opts.on_event.
--   lua5.4 examples/metrics.lua [redis-url]
-- Serve render() from your HTTP endpoint (for nginx, see
-- examples/openresty/metrics.lua); here it is printed after some contention.
local redlock = require "redlock"

local url = arg[1] or os.getenv("REDLOCK_URL") or "redis://127.0.0.1:6379"

-- One log line per lost lock (and per renewal that failed): the hook runs
-- in this thread, at the client's next call, and must not raise (an error
-- would only be counted in stats().hook_errors).
local lost_lines = 0
local function on_event(ev)
    if ev.type == "lost" then
        lost_lines = lost_lines + 1
        io.stderr:write(string.format("lock lost: key=%s reason=%s fence=%s servers=%s\n",
            ev.key, tostring(ev.err), tostring(ev.fence), table.concat(ev.servers, ",")))
    elseif ev.type == "renew_failed" then
        io.stderr:write(string.format("lock renewal failed: key=%s err=%s\n", ev.key, tostring(ev.err)))
    end
end

local client = redlock.new { servers = { url }, retry_delay = 10, retry_jitter = 5, on_event = on_event }
local other = redlock.new { servers = { url }, retry_delay = 10, retry_jitter = 5 }

-- Prometheus' text format (version 0.0.4) from one stats() table. prefix:
-- the metric names' prefix; labels: extra labels, e.g. 'app="shop"'.
local function render(st, prefix, labels)
    prefix = prefix or "redlock"
    local out = {}
    local function line(name, extra, value)
        local l = labels and labels ~= "" and labels or nil
        if extra and l then l = l .. "," .. extra elseif extra then l = extra end
        out[#out + 1] = string.format("%s_%s%s %s", prefix, name, l and "{" .. l .. "}" or "",
            value == math.huge and "+Inf" or string.format("%.17g", value))
    end
    out[#out + 1] = string.format("# TYPE %s_events_total counter", prefix)
    for _, what in ipairs { "acquired", "refused", "timeout", "quorum_failed", "released", "not_owner",
        "extended", "renewed", "lost", "server_error", "hook_errors" } do
        line("events_total", string.format('type="%s"', what), st[what])
    end
    out[#out + 1] = string.format("# TYPE %s_wait_ms histogram", prefix)
    for _, b in ipairs(st.wait.buckets) do
        line("wait_ms_bucket", string.format('le="%s"', b.le == math.huge and "+Inf" or b.le), b.count)
    end
    line("wait_ms_sum", nil, st.wait.sum)
    line("wait_ms_count", nil, st.wait.count)
    out[#out + 1] = string.format("# TYPE %s_server_errors_total counter", prefix)
    local names = {}
    for name in pairs(st.servers) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do
        line("server_errors_total", string.format('server="%s"', name), st.servers[name].errors)
    end
    return table.concat(out, "\n") .. "\n"
end

-- Some traffic: 3 locks taken and released, each met once by a
-- try_acquire that is refused and an acquire that times out.
local key = "example:metrics"
for _ = 1, 3 do
    assert(other:with_lock(key, function()
        assert(not client:try_acquire(key))
        assert(not client:acquire(key, { wait = 20 }))
    end))
    assert(client:with_lock(key, function() end))
end

-- A lock lost while held: someone deletes its key (here redis-cli, as an
-- operator would); the renewal finds it gone, and the hook writes the line
-- at the next call.
local lock = assert(client:acquire(key, { ttl = 300, renew = true }))
assert(os.execute(string.format("redis-cli -u %q DEL %q >/dev/null", url, key)))
for _ = 1, 250 do -- at most about 5 s
    if lock:lost() then break end
    os.execute("sleep 0.02")
end
lock:release() -- not owner: it was lost

local text = render(client:stats(), "redlock", 'app="example"')
io.write(text)
local st = client:stats()
assert(st.acquired == 4 and st.refused == 3 and st.timeout == 3 and st.released == 3, text)
assert(st.lost == 1 and lost_lines == 1, "one lost lock, one log line")
assert(text:find('redlock_wait_ms_bucket{app="example",le="+Inf"} 10', 1, true), text)
print("exported " .. select(2, text:gsub("\n", "")) .. " lines; 1 lost lock logged")
client:close()
other:close()
