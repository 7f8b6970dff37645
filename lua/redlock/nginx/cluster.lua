--- Redis Cluster inside nginx: the Cluster kind of the cosocket transport
-- (redlock.nginx.conn's request loop runs the core's attempts: csrc/topology/topo.c,
-- the same rules as the hiredis paths). This file keeps the worker's slot
-- map (a core.topology("cluster")), names its nodes, and loads it as the
-- core says. Internal.
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
local now = core.now
local concat, tostring, find = table.concat, tostring, string.find
local ipairs = ipairs

local _M = {}

-- This worker's maps, by seed list: { map = core.topology("cluster"), nodes =
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
        st = { map = core.topology("cluster", spec.cluster), nodes = {}, loading = false }
        maps[id] = st
    end
    return { map = st, id = id }
end

--- Loads the map of server's Cluster with CLUSTER SLOTS, asking its known
-- nodes in the core's order. query(server, node): CLUSTER SLOTS on a
-- connection to node, its reply as a core reply (reader:get(true)), or nil,
-- message, code, reused, timed_out. true, or nil, message, code. While a light thread
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
        local r, qerr, _, reused, timed_out = query(server, node_of(st, i))
        if r then
            local rc, perr = map:load_reply(ld, i, r)
            r:free()
            if rc ~= 1 then
                st.loading = false
                if rc == 0 then return true end
                return nil, perr, "server"
            end
        else
            map:load_failed(ld, i, tostring(qerr), reused, timed_out)
        end
    end
end

--- The node table of server's Cluster node i (a verdict's), for
-- redlock.nginx.conn's request loop.
function _M.node(server, i) return node_of(server.cluster.map, i) end

--- A node for a command without a key, and for the release subscriber
-- (PUBLISH reaches every node of a Cluster, from scripts too). after: a
-- node that failed, to move past.
function _M.any_node(server, after)
    local st = server.cluster.map
    return node_of(st, st.map:any(after and after.index))
end


--- The Cluster kind of redlock.nginx.conn (an entry of its KINDS: see
-- there), given its cosocket primitives (pool_name, query: see _M.load).
function _M.kind(io)
    return {
        option = "cluster",
        routed = true,
        init = function(self, spec)
            -- this worker's slot map for its seeds, the pool and the names
            -- for each node; its release subscriber (redlock.nginx.wait):
            -- one per worker, seeds and credentials, as a pool is
            self.cluster = _M.new(spec)
            self.topo = self.cluster.map.map
            self.node_pools, self.node_views = {}, {}
            self.wait_id = io.pool_name(self, self.cluster.id, 0)
        end,
        address = function(self, node)
            node = node or _M.any_node(self)
            local pool = self.node_pools[node]
            if not pool then
                pool = io.pool_name(self, node.dial, node.port)
                self.node_pools[node] = pool
            end
            return node.dial, node.port, pool
        end,
        node = _M.node,
        any_node = _M.any_node,
        reload = function(self) return _M.load(self, io.query) end,
    }
end

return _M
