--- The example handler: a read-modify-write of a Redis counter (GET, then
-- SET to value + 1) that only the lock's holder runs, so that concurrent
-- requests on every worker of every nginx lose no update.
--
--    location = /incr { content_by_lua_block { require("counter").incr() } }
local redlock = require "redlock"
local store = require "store"

local ngx = ngx
local tonumber = tonumber

local _M = {}

--- Makes the client once, in init_by_lua (the master process).
-- @tparam table redis host and port of the Redis server
function _M.init(redis)
    _M.redis = redis
    _M.client = redlock.new {
        servers = { { host = redis.host, port = redis.port } },
        ttl = 5000,       -- the lock frees itself 5 s after a crashed holder
        wait = 10000,     -- how long a request waits for the lock
        retry_delay = 5,  -- while it waits, ngx.sleep: the worker serves others
        retry_jitter = 5,
        -- each lock event counted in a shared dict, served at /metrics
        on_event = require("metrics").on_event,
    }
end

--- content_by_lua handler: GET /incr?key=NAME answers the new value;
-- 503 when the lock stayed held for `wait`, 502 when Redis failed.
-- @param[opt] client another redlock client to lock with
function _M.incr(client)
    local key = ngx.var.arg_key or "counter"
    local redis = _M.redis
    local ok, value, code = (client or _M.client):with_lock("lock:" .. key, function()
        local v = assert(store.command(redis, "GET", key))
        v = (v == ngx.null) and 0 or tonumber(v)
        -- a yield between the read and the write, as real work would have:
        -- without the lock, concurrent requests would overwrite each other
        ngx.sleep(0.001)
        assert(store.command(redis, "SET", key, v + 1))
        return v + 1
    end)
    if not ok then
        ngx.status = (code == "timeout" or code == "locked") and 503 or 502
        ngx.say(value)
        return
    end
    ngx.say(value)
end

return _M
