--- Redis Sentinel inside nginx: the cosocket driver of the topology core's
-- Sentinel rules (csrc/topology/topo.c, through core.sentinel_answer,
-- core.sentinel_failure and core.role_verdict: the same reading of the
-- sentinels' answers and of ROLE, and the same messages, as csrc/drivers/sentinel.c
-- over hiredis). The sentinels are asked in turn, each with a short
-- timeout, as the topology core's policy says (core.sentinel_locate,
-- core.sentinel_check: the same as csrc/drivers/sentinel.c's). The address
-- is checked every sentinel_check ms, and, when nginx.conf has
-- `lua_shared_dict redlock_sentinel 1m;`, shared by all workers for as long,
-- so that a burst of requests does not ask the sentinels once per request.
-- A ROLE check on every new connection (in the core's rounds) and READONLY
-- replies make the server forget the address (redlock.nginx.cosocket).
-- Each worker also subscribes to +switch-master on one sentinel of each set
-- of sentinels it uses (a timer, started by the first address asked): the
-- sentinels announce a failover there as soon as they made it, and the
-- address is replaced at once, in the worker and in the shared dict, and
-- the release subscribers of that master move (redlock.nginx.wait), so that
-- its waiters try again on the new master; the periodic question stays as
-- the fallback. Internal.
local core = require "redlock.core"
local pubsub = require "redlock.nginx.pubsub"

local ngx = rawget(_G, "ngx")
local encode, new_reader, now = core.encode, core.reader, core.now
local sentinel_answer, sentinel_failure = core.sentinel_answer, core.sentinel_failure
local sentinel_locate, sentinel_check, check_due = core.sentinel_locate, core.sentinel_check,
    core.sentinel_check_due
local io_stale = core.io_stale
local DEFAULTS = core.defaults -- csrc/defaults.h
local TOPO = core.topology("sentinel")
local format, concat, tostring = string.format, table.concat, tostring
local match, min = string.match, math.min
local ipairs, pairs, next, tonumber, insert, remove, setmetatable =
    ipairs, pairs, next, tonumber, table.insert, table.remove, setmetatable

local _M = {}

-- The cosocket primitives of redlock.nginx.conn (exchange, handshake, setup,
-- pool_name, drain), given by _M.kind: they are its locals.
local io

local DICT = "redlock_sentinel"
-- ms: a dead sentinel must not cost a whole connect timeout (csrc/defaults.h)
local TIMEOUT_CAP = core.defaults.sentinel_cap
local SWITCH_CHANNEL = "+switch-master"

-- This worker's +switch-master subscriptions, by set of sentinels (their
-- addresses and credentials): { nodes, connect_timeout, timeout, check_ms,
-- states (the server states watched, weak), running, listening (subscribed
-- now: an announcement made meanwhile reaches this worker), next }.
local watches = {}

--- The Sentinel state of a cosocket server made from spec (nil when spec
-- has no sentinels). connect_timeout, timeout: the server's.
function _M.new(spec, connect_timeout, timeout)
    if not spec.sentinels then return nil end
    local nodes, addrs = {}, {}
    for i, node in ipairs(spec.sentinels) do
        local host = node.host
        local shown = host:find(":", 1, true) and ("[" .. host .. "]") or host
        nodes[i] = {
            host = host, port = node.port,
            name = format("sentinel %s:%d", shown, node.port),
            -- what redlock.nginx.cosocket's setup and handshake read
            spec = { username = spec.sentinel_username, password = spec.sentinel_password,
                     tls = spec.sentinel_tls },
        }
        addrs[i] = shown .. ":" .. node.port
    end
    local st = {
        nodes = nodes,
        master_name = spec.master_name,
        check_ms = spec.sentinel_check or core.defaults.sentinel_check,
        -- (0 would be lua_socket_*_timeout for a cosocket: 60 s by default)
        connect_timeout = connect_timeout > 0 and min(connect_timeout, TIMEOUT_CAP) or TIMEOUT_CAP,
        timeout = timeout > 0 and min(timeout, TIMEOUT_CAP) or TIMEOUT_CAP,
        dict_key = "m:" .. spec.master_name .. "|" .. concat(addrs, ","),
        host = nil, port = nil, checked = -math.huge,
    }
    local set = concat(addrs, ",") .. "|" .. (spec.sentinel_username or "") .. "|"
        .. (spec.sentinel_password or "") .. "|" .. (spec.sentinel_tls and "tls" or "")
    local w = watches[set]
    if not w then
        w = { nodes = nodes, connect_timeout = st.connect_timeout, timeout = st.timeout,
            check_ms = st.check_ms, states = setmetatable({}, { __mode = "k" }), running = false, next = 0 }
        watches[set] = w
    end
    w.states[st] = true
    st.watch = w
    return st
end

-- A connection to sentinel node, set up (TLS, AUTH): sock, rd | nil,
-- message. pool: the keepalive pool, or nil (a connection of its own);
-- read_ms: its read timeout (default: the sentinels' timeout).
local function open_node(st, node, pool, read_ms)
    local sock, err = ngx.socket.tcp()
    if not sock then return nil, format("connection: %s: %s", node.name, tostring(err)) end
    sock:settimeouts(st.connect_timeout, st.timeout, read_ms or st.timeout)
    local ok
    ok, err = sock:connect(node.host, node.port, pool and { pool = pool } or nil)
    if not ok then
        return nil, format("connection: %s: could not connect (%s)", node.name, tostring(err))
    end
    local rd = new_reader()
    if sock:getreusedtimes() == 0 then
        if node.spec.tls then
            ok, err = io.handshake(node, sock)
            if not ok then
                sock:close()
                return nil, err
            end
        end
        ok, err = io.setup(node, sock, rd, st.timeout)
        if not ok then
            sock:close()
            return nil, err
        end
    end
    return sock, rd
end

-- What one sentinel says: host, port | false (a null reply: it knows no
-- such master) | nil, message. A pooled connection the sentinel had
-- dropped while idle is asked once more on a fresh one (core.io_stale, the
-- rule of every request).
local function ask(st, node)
    local pool = format("redlock-sentinel:%s:%d:%s", node.host, node.port,
        node.spec.password and ngx.md5((node.spec.username or "") .. "\0" .. node.spec.password) or "")
    local req = encode("SENTINEL", "get-master-addr-by-name", st.master_name)
    local fresh = false
    while true do
        -- (fresh: a connection of its own, closed after the question)
        local sock, rd = open_node(st, node, not fresh and pool or nil)
        if not sock then return nil, rd end
        local reused = sock:getreusedtimes() > 0
        local done, v, msg = io.exchange(sock, rd, req, true)
        if done and v ~= nil then
            if fresh then sock:close() else sock:setkeepalive(DEFAULTS.keepalive_timeout, 4) end
            local host, port = sentinel_answer(v, node.name) -- the core's reading
            v:free()
            return host, port
        end
        sock:close()
        if done or fresh or not io_stale(reused, false, v == "timeout") then
            return nil, format("connection: %s: %s", node.name, tostring(done and msg or v))
        end
        fresh = true
    end
end

-- Finds the master as the core's policy says (core.sentinel_locate): host,
-- port or nil, message.
local function locate(st)
    local nodes, why, unknown, i = st.nodes, {}, 0, 0
    while true do
        i = i + 1
        local host, port = ask(st, nodes[i])
        if host == false then
            unknown = unknown + 1
        elseif not host then
            why[#why + 1] = port
        end
        local v = sentinel_locate(i, #nodes, host)
        if v == "done" then
            if i > 1 then insert(nodes, 1, remove(nodes, i)) end
            return host, port
        elseif v == "fail" then
            return nil, sentinel_failure(st.master_name, unknown, #nodes, concat(why, "; "))
        end
    end
end

-- The address found or confirmed, for this worker and (with the shared
-- dict) the others, until the next check: "host port checked", checked
-- on CLOCK_MONOTONIC (core.now), which every worker reads alike, so that
-- another worker's next check is due when this one's is.
local function confirmed(st, host, port, checked)
    st.host, st.port, st.checked = host, port, checked or now()
    local dict = ngx.shared[DICT]
    if dict then dict:set(st.dict_key, format("%s %d %.3f", host, port, st.checked), st.check_ms / 1000) end
    return host, port
end

-- Told of each switch a +switch-master message announces (on_switch).
local listeners = {}

--- Calls fn(mine) for each switch announced from now on, mine(server)
-- telling whether that server's master is the one that moved (the kind's
-- on_switch: redlock.nginx.wait moves its subscribers).
function _M.on_switch(fn) listeners[#listeners + 1] = fn end

-- A +switch-master message (the topology core reads it: name, new host and
-- port). Every watched state of that master takes the new address now.
local function switched(w, payload)
    local name, host, port = core.sentinel_switch(payload)
    if not name then return end
    for st in pairs(w.states) do
        if st.master_name == name then
            confirmed(st, host, port)
            local function mine(server) return server.sentinel == st end
            for i = 1, #listeners do listeners[i](mine) end
        end
    end
end

-- The timer of a set of sentinels: subscribed to +switch-master on one of
-- them (the next one after a failure, check_ms later), while this worker
-- watches states of that set and is not exiting.
local function watch(premature, w)
    local h = {
        message = function(_, payload) switched(w, payload) end,
        tick = function() return ngx.worker.exiting() or next(w.states) == nil end,
    }
    while not premature and not h.tick() do
        local node = w.nodes[w.next % #w.nodes + 1]
        w.next = w.next + 1
        h.done = false
        -- the reader gives up on a sentinel silent for three ticks
        local sock, rd = open_node(w, node, nil, 3 * pubsub.TICK_MS + w.timeout)
        if sock then
            if pubsub.subscribe(sock, rd, SWITCH_CHANNEL) then
                w.listening = true
                pubsub.pump(h, sock, rd)
                w.listening = false
            end
            sock:close()
        end
        -- A sentinel that failed: the next one, check_ms later (as
        -- csrc/drivers/sentinel.c). A pump that ended because nothing was
        -- watched goes round at once: a state that came meanwhile (its
        -- address asked after this timer's last look) must not wait a
        -- check_ms unheard, this timer still counted as running.
        if not h.done then
            if h.tick() then break end
            ngx.sleep(w.check_ms / 1000)
        end
    end
    w.running = false
end

--- The master's address for server (a redlock.nginx.cosocket server with
-- server.sentinel): host, port; or nil, message. Checks it as the core's
-- policy says (core.sentinel_check_due, core.sentinel_check) once it is
-- max_age ms old (default and at most sentinel_check: the timer renewal
-- asks for less, as csrc/drivers/renew_io.c does), unless another worker
-- did since (the shared dict: the address with the time it was checked);
-- finds it when none is known, or forgotten.
function _M.address(server, max_age)
    local st = server.sentinel
    local w = st.watch
    if not w.running and ngx.timer.at(0, watch, w) then w.running = true end
    local t = now()
    max_age = max_age or st.check_ms
    if st.host and not check_due(t, st.checked, st.check_ms, max_age) then return st.host, st.port end
    local dict = ngx.shared[DICT]
    local shared = dict and dict:get(st.dict_key)
    if shared then
        -- ("host port checked": no NUL, which a LuaJIT pattern takes for its end)
        local host, port, checked = match(shared, "^(%S+) (%d+) (%S+)$")
        checked = tonumber(checked)
        -- (the latest confirmation of all workers; checked by this one's rule)
        if host and checked > st.checked then
            st.host, st.port, st.checked = host, tonumber(port), checked
            if not check_due(t, checked, st.check_ms, max_age) then return st.host, st.port end
        end
    end
    if st.host then
        local nodes = st.nodes
        local host, port = ask(st, nodes[1])
        local v, checked = sentinel_check(host, host == st.host and port == st.port, now(), st.check_ms,
            max_age)
        if v == "keep" then return confirmed(st, st.host, st.port, checked) end
        if v == "rotate" then
            insert(nodes, remove(nodes, 1))
            st.checked = checked
            return st.host, st.port
        end
        _M.forget(server)
    end
    local host, port = locate(st)
    if not host then return nil, port end
    return confirmed(st, host, port)
end

--- Forgets server's master address (a ROLE that is not master, READONLY):
-- the next connection asks the sentinels.
function _M.forget(server)
    local st = server.sentinel
    st.host, st.port, st.checked = nil, nil, -math.huge
    local dict = ngx.shared[DICT]
    if dict then dict:delete(st.dict_key) end
end


--- The Sentinel kind of redlock.nginx.conn (an entry of its KINDS: see
-- there), given its cosocket primitives.
function _M.kind(primitives)
    io = primitives
    return {
        option = "sentinels",
        rounds = true,
        init = function(self, spec, o)
            self.topo = TOPO
            self.wait_id = io.pool_name(self) -- (its pool is its master's of the moment)
            self.sentinel = _M.new(spec,
                spec.connect_timeout or o.connect_timeout or DEFAULTS.connect_timeout,
                spec.timeout or o.timeout or DEFAULTS.timeout)
        end,
        address = function(self)
            local host, port = _M.address(self)
            if not host then return nil, port end
            local pool = io.pool_name(self, host, port)
            local st = self.sentinel
            if st.used_pool ~= pool then
                -- the master moved: this worker's idle connections to the old
                -- one are closed now, not when keepalive_timeout ends them
                if st.used_pool then io.drain(st.used_host, st.used_port, st.used_pool, self.pool_size) end
                st.used_host, st.used_port, st.used_pool = host, port, pool
            end
            return host, port, pool
        end,
        unreached = function(self, err, host, port)
            _M.forget(self) -- a dead master: ask the sentinels next time
            return format("%s at %s:%d", tostring(err), host, port)
        end,
        forget = _M.forget,
        -- the timer renewal's check, twice per renewal interval (max_age)
        recheck = function(self, max_age) _M.address(self, max_age) end,
        -- for a subscriber on the master (redlock.nginx.wait): whether the
        -- master is another than host:port now, and the switches announced
        moved = function(self, host, port)
            local h, p = _M.address(self)
            return h ~= nil and (h ~= host or p ~= port)
        end,
        on_switch = _M.on_switch,
    }
end

return _M
