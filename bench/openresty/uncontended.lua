--- The handler of `make bench-nginx-uncontended` (bench/nginx_uncontended.lua),
-- loaded into nginx beside examples/openresty: GET
-- /uncontended?key=K&how=H takes and releases one lock on lock:K (a key of
-- its own: nobody else holds or waits for it) and answers the µs that cycle
-- took inside the request (see run). H:
--   lib            redlock, the default client (fenced)
--   lib_unfenced   redlock with fence = false
--   floor          by hand over a cosocket: SET key token NX PX ttl, then
--                  EVALSHA of the textbook compare-and-delete script
--   floor_fenced   the same, the SET sent with the XADD that fences a grant
--                  (what conn:grant sends outside nginx: core.grant_fence_command,
--                  XADD redlock:fences MAXLEN ~ 1 * f 1) in one write, the
--                  fence computed from its ID
-- The floors take one pooled connection for the request (connect, two
-- round trips, setkeepalive) and the same token source as the library.
local redlock = require "redlock"
local counter = require "counter"
local core = require "redlock.core"

local ngx = ngx
local now, token, format, concat, tonumber = core.now, core.token, string.format, table.concat,
    tonumber

local _M = {}

local TTL = 10000
local TTL_S = tostring(TTL)
local COUNTER = "redlock:fences" -- redlock.util.FENCE_COUNTER
local EPOCH = 1767225600000      -- scripts/parts/fence.lua's EPOCH
local POOL = "bench:floor"
-- the textbook release (the Redis documentation's SET page)
local DEL_SCRIPT = "if redis.call('get', KEYS[1]) == ARGV[1] then "
    .. "return redis.call('del', KEYS[1]) else return 0 end"

local clients = {}

local function client(fence)
    local c = clients[fence]
    if not c then
        local r = counter.redis
        c = redlock.new { servers = { { host = r.host, port = r.port } }, ttl = TTL, fence = fence }
        clients[fence] = c
    end
    return c
end

local function library(fence, key)
    local lock, err = client(fence):acquire(key)
    if not lock then return nil, err end
    local ok, rerr = lock:release()
    if not ok then return nil, rerr end
    return true
end

-- RESP by hand, as a user without a library writes it
local function resp(...)
    local n = select("#", ...)
    local out = { "*", n, "\r\n" }
    for i = 1, n do
        local a = select(i, ...)
        out[#out + 1] = format("$%d\r\n%s\r\n", #a, a)
    end
    return concat(out)
end

local XADD = resp(unpack(core.grant_fence_command(COUNTER)))
local sha -- the release script's, loaded once per worker

local function connect()
    local sock = ngx.socket.tcp()
    sock:settimeouts(1000, 1000, 1000)
    local r = counter.redis
    local ok, err = sock:connect(r.host, r.port, { pool = POOL })
    if not ok then return nil, err end
    return sock
end

-- one reply line; a bulk string's payload for "$"
local function reply(sock)
    local line, err = sock:receive("*l")
    if not line then return nil, err end
    local c = line:sub(1, 1)
    if c == "$" then
        local len = tonumber(line:sub(2))
        if len < 0 then return false end
        local data
        data, err = sock:receive(len + 2)
        if not data then return nil, err end
        return data:sub(1, len)
    end
    if c == "-" then return nil, line end
    return line
end

local function floor(fenced, key)
    local sock, err = connect()
    if not sock then return nil, err end
    if not sha then
        sock:send(resp("SCRIPT", "LOAD", DEL_SCRIPT))
        sha, err = reply(sock)
        if not sha then return nil, err end
    end
    local tok = token()
    local set = resp("SET", key, tok, "NX", "PX", TTL_S)
    local ok
    ok, err = sock:send(fenced and set .. XADD or set)
    if not ok then return nil, err end
    local r
    r, err = reply(sock)
    if r ~= "+OK" then return nil, "SET: " .. tostring(err or r) end
    if fenced then
        local id
        id, err = reply(sock)
        if not id then return nil, "XADD: " .. tostring(err) end
        local ms, seq = id:match("^(%d+)-(%d+)$")
        local fence = (tonumber(ms) - EPOCH) * 100 + tonumber(seq)
        if fence < 1 then return nil, "no fence" end
    end
    ok, err = sock:send(resp("EVALSHA", sha, "1", key, tok))
    if not ok then return nil, err end
    r, err = reply(sock)
    if r ~= ":1" then return nil, "release: " .. tostring(err or r) end
    sock:setkeepalive(60000, 32) -- the library's defaults (csrc/defaults.h)
    return true
end

local HOW = {
    lib = function(key) return library(true, key) end,
    lib_unfenced = function(key) return library(false, key) end,
    floor = function(key) return floor(false, key) end,
    floor_fenced = function(key) return floor(true, key) end,
}

-- &n=N (default 1): N cycles in this request, on keys K:1 .. K:N, and the
-- mean µs of one (for a profile without HTTP in the way). The answer, in
-- the body and in the header X-Cycle (bench/nginx_uncontended.lua reads
-- that one: Nginx:parallel_header): the µs, or "failed: " and why.
function _M.run()
    local f = HOW[ngx.var.arg_how]
    local key = "lock:" .. ngx.var.arg_key
    local n = tonumber(ngx.var.arg_n) or 1
    local t0 = now()
    for i = 1, n do
        local ok, err = f(n == 1 and key or key .. ":" .. i)
        if not ok then
            local msg = "failed: " .. tostring(err):gsub("[%c]", " ")
            ngx.status = 500
            ngx.header["X-Cycle"] = msg
            return ngx.say(msg)
        end
    end
    local us = format("%.1f", (now() - t0) * 1000 / n)
    ngx.header["X-Cycle"] = us
    ngx.say(us)
end

return _M
