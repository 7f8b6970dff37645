--- The handler of `make bench-nginx` (bench/nginx.lua), loaded into nginx
-- beside examples/openresty: GET /contend?key=K&notify=0|1&ms=N[&limit=L][&fair=1]
-- takes lock:K (a permit of a semaphore of L with limit; waiting up to
-- 10 s), holds it N ms, releases it, and answers the
-- ms it waited for it, the ms its hold (ngx.sleep) really took, when the
-- hold began and ended (core.now()), and the ms its release took.
local redlock = require "redlock"
local counter = require "counter"
local core = require "redlock.core"

local ngx = ngx
local now, format, tonumber, tostring = core.now, string.format, tonumber, tostring

local _M = {}
local clients = {}

local function client(notify, fair)
    local name = tostring(notify) .. tostring(fair)
    local c = clients[name]
    if not c then
        local r = counter.redis
        c = redlock.new { servers = { { host = r.host, port = r.port } }, wait = 10000, notify = notify,
            fair = fair }
        clients[name] = c
    end
    return c
end

function _M.contend()
    local c = client(ngx.var.arg_notify ~= "0", ngx.var.arg_fair == "1")
    local t0 = now()
    local limit = tonumber(ngx.var.arg_limit)
    local lock, err = c:acquire("lock:" .. ngx.var.arg_key, limit and { limit = limit } or nil)
    local waited = now() - t0
    if not lock then
        ngx.status = 503
        return ngx.say(err)
    end
    local t1 = now()
    ngx.sleep((tonumber(ngx.var.arg_ms) or 3) / 1000)
    local t2 = now()
    lock:release()
    -- (t1, t2: when the hold began and ended, on the monotonic clock every
    -- worker shares: the gaps between holders, see bench/nginx.lua)
    local line = format("%.3f %.3f %.3f %.3f %.3f", waited, t2 - t1, t1, t2, now() - t2)
    -- (also in a header: the benchmark reads that one, bodies to /dev/null)
    ngx.header["X-Contend"] = line
    ngx.say(line)
end

return _M
