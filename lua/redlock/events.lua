--- Events and metrics: the counters behind client:stats() and the calls of
-- opts.on_event. Internal; redlock.lua, redlock.hold and redlock.quorum
-- call it at the points named there.
--
-- The counters are plain integers in one table per client, always on. The
-- hook runs in the caller's own thread, inside a pcall: an error it raises
-- is counted (stats().hook_errors) and written once per client to stderr
-- (inside nginx: ngx.log(ngx.ERR)); the lock operation goes on as if the
-- hook had returned. Nothing here is called to build an event when no hook
-- is set.
local pcall, type, tostring, ipairs, pairs = pcall, type, tostring, ipairs, pairs
local huge = math.huge

local _M = {}

--- The upper bounds (ms) of the wait-time histogram's buckets; a last
-- bucket counts the waits above the largest.
_M.BOUNDS = { 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000 }
local BOUNDS = _M.BOUNDS
local NB = #BOUNDS

--- The counters of stats(), by name (the event types that are counted).
_M.COUNTERS = {
    "acquired", "refused", "timeout", "quorum_failed", "released", "not_owner", "extended",
    "lost", "server_error", "hook_errors",
}
local COUNTERS = _M.COUNTERS

--- A fresh set of counters.
function _M.new_stats()
    local st = { wait_count = 0, wait_sum = 0, wait_max = 0, buckets = {} }
    for _, name in ipairs(COUNTERS) do st[name] = 0 end
    for i = 1, NB + 1 do st.buckets[i] = 0 end
    return st
end

--- Counts one ended acquire (kind: its counter) that took `waited` ms.
function _M.count_acquire(st, kind, waited)
    st[kind] = st[kind] + 1
    st.wait_count = st.wait_count + 1
    st.wait_sum = st.wait_sum + waited
    if waited > st.wait_max then st.wait_max = waited end
    local b = st.buckets
    for i = 1, NB do
        if waited <= BOUNDS[i] then
            b[i] = b[i] + 1
            return
        end
    end
    b[NB + 1] = b[NB + 1] + 1
end

local function complain(client, err)
    local msg = "redlock: on_event raised (once per client; counted in stats().hook_errors): "
        .. tostring(err)
    local ngx = rawget(_G, "ngx")
    if type(ngx) == "table" and ngx.log then
        ngx.log(ngx.ERR, msg)
    else
        io.stderr:write(msg, "\n")
    end
    client.hook_complained = true
end

--- Calls hook(ev) protected. An error is counted and told once.
function _M.emit(client, hook, ev)
    ev.servers = client.names
    if client.one then ev.server = ev.server or client.one.name end
    local ok, err = pcall(hook, ev)
    if not ok then
        local st = client.st
        st.hook_errors = st.hook_errors + 1
        if not client.hook_complained then complain(client, err) end
    end
end

--- What client:stats() returns: a copy of the counters, with the wait
-- histogram as cumulative buckets ({le = ms, count = n}, the last le =
-- math.huge) and errors per server name. reset: zero them afterwards.
function _M.snapshot(client, renewals, reset)
    local st = client.st
    local out = {}
    for _, name in ipairs(COUNTERS) do out[name] = st[name] end
    out.renewed = renewals
    local buckets, sum = {}, 0
    for i = 1, NB + 1 do
        sum = sum + st.buckets[i]
        buckets[i] = { le = BOUNDS[i] or huge, count = sum }
    end
    out.wait = { count = st.wait_count, sum = st.wait_sum, max = st.wait_max, buckets = buckets }
    local servers = {}
    for _, server in ipairs(client.servers) do
        servers[server.name] = { errors = server.errors or 0 }
        if reset then server.errors = 0 end
    end
    out.servers = servers
    if reset then
        local fresh = _M.new_stats()
        for k in pairs(st) do st[k] = fresh[k] end
    end
    return out
end

return _M
