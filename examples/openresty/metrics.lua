--- Lock metrics inside nginx: every worker's lock events counted in one
-- shared dict, served as Prometheus text at /metrics (the way
-- nginx-lua-prometheus does it, without depending on it), and one log line
-- per lost lock.
--
--    lua_shared_dict redlock_metrics 1m;
--    client = redlock.new { ..., on_event = require("metrics").on_event }
--    location = /metrics { content_by_lua_block { require("metrics").serve() } }
--
-- The hook runs in the request (or timer) that made the lock call: it only
-- does non-blocking work, a few shared-dict increments and ngx.log.
local ngx = ngx
local format, concat = string.format, table.concat

local _M = {}

--- The shared dict's name (lua_shared_dict).
_M.DICT = "redlock_metrics"

-- the wait histogram's bucket bounds, ms: those of client:stats()
-- (docs/events.md), so that both exports line up
local BOUNDS = { 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000 }
local TYPES = {
    "acquired", "refused", "timeout", "quorum_failed", "released", "not_owner", "extended",
    "renewed", "renew_failed", "lost", "server_error", "warning",
}

--- The on_event hook: counts ev in the shared dict.
function _M.on_event(ev)
    local dict = ngx.shared[_M.DICT]
    if not dict then return end
    local kind = ev.type
    -- renewed / renew_failed may stand for several renewals (ev.attempts)
    local n = (kind == "renewed" or kind == "renew_failed") and ev.attempts or 1
    dict:incr("events:" .. kind, n, 0)
    if ev.waited then
        local w = ev.waited
        dict:incr("wait_count", 1, 0)
        dict:incr("wait_sum", w, 0)
        local bucket = #BOUNDS + 1
        for i = 1, #BOUNDS do
            if w <= BOUNDS[i] then
                bucket = i
                break
            end
        end
        dict:incr("wait_bucket:" .. bucket, 1, 0)
    end
    if kind == "server_error" and ev.server then
        dict:incr("server_errors:" .. ev.server, 1, 0)
    end
    if kind == "lost" then
        ngx.log(ngx.WARN, format("redlock: lock lost: key=%s reason=%s fence=%s", ev.key,
            tostring(ev.err), tostring(ev.fence)))
    end
end

--- The Prometheus text of the shared dict's counts.
function _M.render()
    local dict = ngx.shared[_M.DICT]
    local out = { "# TYPE redlock_events_total counter" }
    for _, kind in ipairs(TYPES) do
        out[#out + 1] = format('redlock_events_total{type="%s"} %d', kind, dict:get("events:" .. kind) or 0)
    end
    out[#out + 1] = "# TYPE redlock_wait_ms histogram"
    local sum = 0
    for i = 1, #BOUNDS + 1 do
        sum = sum + (dict:get("wait_bucket:" .. i) or 0)
        out[#out + 1] = format('redlock_wait_ms_bucket{le="%s"} %d', BOUNDS[i] or "+Inf", sum)
    end
    out[#out + 1] = format("redlock_wait_ms_sum %d", dict:get("wait_sum") or 0)
    out[#out + 1] = format("redlock_wait_ms_count %d", dict:get("wait_count") or 0)
    out[#out + 1] = "# TYPE redlock_server_errors_total counter"
    for _, k in ipairs(dict:get_keys(0)) do
        local server = k:match("^server_errors:(.+)$")
        if server then
            out[#out + 1] = format('redlock_server_errors_total{server="%s"} %d', server, dict:get(k))
        end
    end
    return concat(out, "\n") .. "\n"
end

--- content_by_lua handler of /metrics.
function _M.serve()
    ngx.header["Content-Type"] = "text/plain; version=0.0.4"
    ngx.print(_M.render())
end

return _M
