--- Redis Cluster inside nginx: the cosocket driver of the topology core
-- (csrc/topo.c through core.cluster_map, the same rules as the hiredis
-- paths: where a command goes, what MOVED, ASK, TRYAGAIN, CLUSTERDOWN, a
-- slot without a node and an unreachable node mean, how the map loads).
-- This file only carries out the core's verdicts with the cosockets that
-- redlock.cosocket gives it. Internal.
--
-- The map lives per worker, in this module's table `maps`, keyed by the
-- seed list (and TLS): every server of the worker made from the same seeds
-- shares it, however many clients the worker makes (one per request
-- included). Not in a shared dict: the map is read on every command (one C
-- index, where a shared dict would give a string to decode), it changes
-- rarely and a stale one is corrected by the node asked (MOVED), and it
-- needs nothing in nginx.conf.
local core = require "redlock.core"

local ngx = rawget(_G, "ngx")
local now, command_slot, keyslot = core.now, core.command_slot, core.keyslot
local concat, tostring, find = table.concat, tostring, string.find
local ipairs = ipairs

local _M = {}

-- This worker's maps, by seed list: { map = core.cluster_map, nodes =
-- index -> node, loading = since when a light thread loads it, or false }.
-- A node: { host, port, name, dial, index }.
local maps = {}

local function shown(host)
    return find(host, ":", 1, true) and ("[" .. host .. "]") or host
end

-- The node table of the map's node i (made once per worker).
local function node_of(st, i)
    local node = st.nodes[i]
    if node then return node end
    local host, port, name = st.map:node(i)
    -- dial: what a cosocket connects to (IPv6 addresses in brackets)
    node = { host = host, port = port, name = name, dial = shown(host), index = i }
    st.nodes[i] = node
    return node
end

--- The Cluster state of a cosocket server made from spec (nil when spec
-- has no cluster): { map = this worker's map for its seeds, id = the seed
-- list }.
function _M.new(spec)
    if not spec.cluster then return nil end
    local addrs = {}
    for i, seed in ipairs(spec.cluster) do addrs[i] = shown(seed.host) .. ":" .. seed.port end
    local id = concat(addrs, ",") .. (spec.tls and "/tls" or "")
    local st = maps[id]
    if not st then
        st = { map = core.cluster_map(spec.cluster), nodes = {}, loading = false }
        maps[id] = st
    end
    return { map = st, id = id }
end

--- The slot of a command (its arguments as given to core.encode), or -1
-- when it has no key (the core's rule).
_M.command_slot = command_slot

--- The slot of a script's first key, or -1 when it has none.
function _M.script_slot(nkeys, key)
    if nkeys < 1 or key == nil then return -1 end
    return keyslot(tostring(key))
end

--- Loads the map of server's Cluster with CLUSTER SLOTS, asking its known
-- nodes in the core's order. query(server, node): CLUSTER SLOTS on a
-- connection to node, its reply as a core reply (reader:get(true)), or nil,
-- message, code, stale. true, or nil, message, code. While a light thread
-- of the worker loads it, another one does not ask again: it keeps the map
-- it has, or waits when it has none. (loading: when that load began; a
-- load whose request was ended midway counts no more after the server's
-- timeout.)
function _M.load(server, query)
    local st = server.cluster.map
    local map = st.map
    local since = st.loading
    if since and now() - since < server.timeout then
        if map:loaded() then return true end
        while st.loading == since and now() - since < server.timeout do ngx.sleep(0.005) end
        if map:loaded() then return true end
    end
    st.loading = now()
    local ld = map:load_start()
    while true do
        local i, err, code = map:load_next(ld, server.name)
        if not i then
            st.loading = false
            return nil, err, code
        end
        local r, qerr, _, stale = query(server, node_of(st, i))
        if r then
            local rc, perr = map:load_reply(ld, i, r)
            r:free()
            if rc ~= 1 then
                st.loading = false
                if rc == 0 then return true end
                return nil, perr, "server"
            end
        else
            map:load_failed(ld, i, stale, tostring(qerr))
        end
    end
end

--- One request on server's Cluster, where the core says: send(node,
-- asking) makes one try (reply, or nil, message, code, stale, timed_out,
-- raw: a server error's own text); query: as load's. limit: ms to follow
-- redirections in; pinned: the caller's connection is pinned (WATCH), so a
-- failed connection is not tried again. Returns what send returned, or
-- nil, message, code when the core gives up.
function _M.route(server, slot, limit, pinned, send, query)
    local st = server.cluster.map
    local map = st.map
    local at = map:attempt(slot, limit, now())
    local v, a, b = map:target(at, now())
    while true do
        if v == "go" then
            local r, err, code, stale, timed_out, raw = send(node_of(st, a), b)
            if r ~= nil then return r, err end
            if code == "server" and raw then
                v, a, b = map:reply(at, raw, now())
                if v == "done" then return nil, err, code end
            elseif code == "connection" and not pinned then
                v, a, b = map:io_failed(at, stale, err, now())
                if v == "fail" then return nil, err, code, false, timed_out end
            else
                return nil, err, code, stale, timed_out
            end
            if v == "resend" then v, a, b = map:target(at, now()) end
        elseif v == "reload" then
            local ok, err, code = _M.load(server, query)
            if not ok then return nil, err, code end
            v, a, b = map:target(at, now())
        elseif v == "pause" then
            ngx.sleep(a / 1000)
            v, a, b = map:target(at, now())
        else
            return nil, a, b
        end
    end
end

--- A node for a command without a key, and for the release subscriber
-- (PUBLISH reaches every node of a Cluster, from scripts too). after: a
-- node that failed, to move past.
function _M.any_node(server, after)
    local st = server.cluster.map
    return node_of(st, st.map:any(after and after.index))
end

return _M
