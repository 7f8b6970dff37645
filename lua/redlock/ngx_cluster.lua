--- Redis Cluster inside nginx: the slot map and the routing of each command
-- to its slot's master, over cosockets (redlock.cosocket's connections use
-- it; outside the yieldable phases the C core does the same over hiredis,
-- see csrc/cluster.c, with the same rules). Internal.
--
-- The map lives per worker, in this module's table `maps`, keyed by the
-- seed list (and TLS): every server of the worker made from the same seeds
-- shares it, however many clients the worker makes (one per request
-- included). It is loaded with CLUSTER SLOTS on first use and again after a
-- MOVED. Not in a shared dict, because:
-- - the map is 16384 slots to a handful of nodes: a worker reads it on
--   every command, and a Lua table answers that with one index, where a
--   shared dict would give a string to decode (or a lookup per slot, under
--   the dict's lock) on every command;
-- - it changes rarely (a resharding, a failover), and a stale map is never
--   wrong for long: the node asked answers MOVED, the worker follows it at
--   once for that slot and reloads the map. Sharing it would only spare
--   each other worker one CLUSTER SLOTS per change;
-- - it needs nothing in nginx.conf.
local core = require "redlock.core"

local ngx = rawget(_G, "ngx")
local keyslot, now = core.keyslot, core.now
local format, concat, tostring, type, tonumber = string.format, table.concat, tostring, type, tonumber
local sub, match, find, upper, byte = string.sub, string.match, string.find, string.upper, string.byte
local ipairs, select = ipairs, select

local _M = {}

--- Slots of a Cluster.
local SLOTS = 16384

-- This worker's slot maps, by seed list: { nodes = list of nodes (seeds
-- first), by_addr = "host:port" -> node, owner = slot -> node, loaded,
-- loading (since when), any (the node for commands without a key) }.
-- A node: { host, port, name, dial }.
local maps = {}

-- Commands without a key (any node answers them), as csrc/cluster.c's list.
local KEYLESS = {
    PING = true, INFO = true, TIME = true, SCRIPT = true, ROLE = true, CLUSTER = true,
    ASKING = true, AUTH = true, SELECT = true, MULTI = true, EXEC = true, DISCARD = true,
    UNWATCH = true, PUBLISH = true, SUBSCRIBE = true, WAIT = true, WAITAOF = true, HELLO = true,
    CLIENT = true, COMMAND = true,
}

local function shown(host)
    return find(host, ":", 1, true) and ("[" .. host .. "]") or host
end

local function add_node(map, host, port)
    local addr = host .. ":" .. port
    local node = map.by_addr[addr]
    if node then return node end
    -- dial: what a cosocket connects to (IPv6 addresses in brackets)
    node = { host = host, port = port, name = shown(host) .. ":" .. port, dial = shown(host) }
    map.nodes[#map.nodes + 1] = node
    map.by_addr[addr] = node
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
    local map = maps[id]
    if not map then
        map = { nodes = {}, by_addr = {}, owner = {}, loaded = false, loading = false }
        for _, seed in ipairs(spec.cluster) do add_node(map, seed.host, seed.port) end
        maps[id] = map
    end
    return { map = map, id = id }
end

--- The slot of a command (its arguments as given to core.encode), or -1
-- when it has no key.
function _M.command_slot(...)
    local name = ...
    if type(name) ~= "string" then return -1 end
    local b = byte(name, 1)
    if b and b >= 97 and b <= 122 then name = upper(name) end
    local n = select("#", ...)
    if name == "EVALSHA" or name == "EVAL" then
        local nkeys = tonumber((select(3, ...)))
        if n < 4 or not nkeys or nkeys < 1 then return -1 end
        return keyslot(tostring((select(4, ...))))
    end
    if KEYLESS[name] or n < 2 then return -1 end
    return keyslot(tostring((select(2, ...))))
end

--- The slot of a script's first key, or -1 when it has none.
function _M.script_slot(nkeys, key)
    if nkeys < 1 or key == nil then return -1 end
    return keyslot(tostring(key))
end

-- Reads CLUSTER SLOTS' answer (from node `from`) into map. true, or nil.
local function read_map(map, from, r)
    if type(r) ~= "table" then return nil end
    local owner = {}
    for _, range in ipairs(r) do
        if type(range) ~= "table" then return nil end
        local lo, hi, master = range[1], range[2], range[3]
        if type(lo) ~= "number" or type(hi) ~= "number" or type(master) ~= "table"
            or type(master[1]) ~= "string" or type(master[2]) ~= "number"
            or lo < 0 or hi >= SLOTS or lo > hi then
            return nil
        end
        local host = master[1]
        -- "" or "?": the node asked, at the address it was asked on
        if host == "" or host == "?" then host = from.host end
        local node = add_node(map, host, master[2])
        for s = lo, hi do owner[s] = node end
    end
    map.owner = owner
    return true
end

--- Loads the map of server's Cluster with CLUSTER SLOTS, asking its known
-- nodes in turn (seeds first). exchange(server, node, ...): one command on
-- a connection to node, as redlock.cosocket runs it (reply, or nil,
-- message, code). true, or nil, message, code. While a light thread of the
-- worker loads it, another one does not ask again: it keeps the map it
-- has, with what MOVED told it, or waits when it has none. (loading: when
-- that load began; a load whose request was ended midway counts no more
-- after the server's timeout.)
function _M.load(server, exchange)
    local map = server.cluster.map
    local since = map.loading
    if since and now() - since < server.timeout then
        if map.loaded then return true end
        while map.loading == since and now() - since < server.timeout do ngx.sleep(0.005) end
        if map.loaded then return true end
    end
    map.loading = now()
    local why = {}
    local nodes = map.nodes
    for i = 1, #nodes do
        local node = nodes[i]
        local r, err, code = exchange(server, node, "CLUSTER", "SLOTS")
        if r == nil and code == "server" then
            map.loading = false
            return nil, format("server: %s: not a cluster node (CLUSTER SLOTS: %s)", node.name,
                sub(match(err, "^server: [^ ]+ (.*)$") or err, 1, 120)), "server"
        elseif r ~= nil then
            local ok = read_map(map, node, r)
            map.loading = false
            if not ok then
                return nil, format("server: %s: unexpected answer to CLUSTER SLOTS", node.name), "server"
            end
            -- commands without a key go to a node known to answer
            map.loaded, map.any = true, node
            return true
        end
        why[#why + 1] = sub(tostring(err), 1, 150)
    end
    map.loading = false
    return nil, format("connection: %s: no cluster node reachable (%s)", server.name, concat(why, "; ")),
        "connection"
end

--- The node that serves slot (any node for -1): node; or nil, message,
-- code when the map cannot be loaded or has no node for the slot.
function _M.node_for(server, slot, exchange)
    local map = server.cluster.map
    if slot < 0 then return map.any or map.nodes[1] end
    if not map.loaded then
        local ok, err, code = _M.load(server, exchange)
        if not ok then return nil, err, code end
    end
    local node = map.owner[slot]
    if not node then
        return nil, format("server: %s: no node serves slot %d (CLUSTERDOWN?)", server.name, slot), "server"
    end
    return node
end

--- A node for a command without a key, and for the release subscriber
-- (PUBLISH reaches every node of a Cluster, from scripts too). after: a
-- node that failed, to move past.
function _M.any_node(server, after)
    local map = server.cluster.map
    local nodes = map.nodes
    if not after then return map.any or nodes[1] end
    local i = 1
    for k, node in ipairs(nodes) do
        if node == after then i = k % #nodes + 1 end
    end
    map.any = nodes[i]
    return nodes[i]
end

--- What a server error says about the Cluster: "moved", "ask", "tryagain",
-- "down", or nil for any other error. For moved and ask, also the slot and
-- the node ("MOVED 3999 127.0.0.1:7002"), added to the map when new.
function _M.redirection(server, msg)
    if type(msg) ~= "string" then return nil end
    local kind
    if sub(msg, 1, 6) == "MOVED " then
        kind = "moved"
    elseif sub(msg, 1, 4) == "ASK " then
        kind = "ask"
    elseif sub(msg, 1, 8) == "TRYAGAIN" then
        return "tryagain"
    elseif sub(msg, 1, 11) == "CLUSTERDOWN" then
        return "down"
    else
        return nil
    end
    local slot, host, port = match(msg, "^%u+ (%d+) (.+):(%d+)$")
    slot, port = tonumber(slot), tonumber(port)
    if not slot or slot >= SLOTS or not port or port < 1 or port > 65535 then return kind end
    host = match(host, "^%[(.*)%]$") or host
    return kind, slot, add_node(server.cluster.map, host, port)
end

--- Believes a MOVED: slot is node's now (until the next load says more).
function _M.moved(server, slot, node)
    server.cluster.map.owner[slot] = node
end

--- Forgets the map: the next command that needs it loads it again.
function _M.forget(server)
    server.cluster.map.loaded = false
end

return _M
