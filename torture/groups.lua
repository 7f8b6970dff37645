--- Sentinel groups and Clusters for a torture run, in network namespaces
-- (torture/topology.lua): who is master now, restarts that rejoin in the
-- right role, and settle(), which waits until the group is whole again
-- after a fault (one master the sentinels agree on, its replica linked;
-- every Cluster node ok, every slot of the workload's keys served).
local helper = require "helper"
local topology = require "torture.topology"

local _M = {}

local NAME = "t"
_M.NAME = NAME

local function addr(srv) return topology.addr(srv) end

--- A master "m" and its replica "r", each in a namespace of its own, and
-- three sentinels in a third ("sen"), all joined. ctx gets data (m, r),
-- sentinels, lock_servers and cli_servers.
function _M.sentinel(ctx)
    local t = ctx.topo
    local ms, rs, ss = t:space("m"), t:space("r"), t:space("sen")
    t.net:link("m", "r")
    t.net:link("sen", "m")
    t.net:link("sen", "r")
    local m = t:data_server("m", { space = ms })
    local r = t:data_server("r", { space = rs, config = { "replicaof " .. m.server.host .. " " .. m.server.port } })
    assert(helper.eventually(15000, function()
        return r.server:cli("INFO", "replication"):find("master_link_status:up", 1, true) ~= nil
    end), "the replica did not connect to its master")
    local sentinels, addrs = {}, {}
    for i = 1, 3 do
        sentinels[i] = helper.start_sentinel({ [NAME] = m.server }, { host = ss.addr, exec = ss.exec,
            server_dir = t.wrap, config = { "protected-mode no" } })
        addrs[i] = ss.addr .. ":" .. sentinels[i].port
    end
    assert(helper.eventually(20000, function()
        for _, s in ipairs(sentinels) do
            local out = s:cli("SENTINEL", "master", NAME)
            if not out:find("num%-other%-sentinels\n2") or not out:find("num%-slaves\n1") then return false end
        end
        return true
    end), "the sentinels did not find each other and the replica")
    ctx.data = { m, r }
    ctx.sentinels = sentinels
    ctx.lock_servers = { { sentinels = addrs, master_name = NAME } }
    ctx.cli_servers = { "redis+sentinel://" .. table.concat(addrs, ",") .. "/" .. NAME }
end

--- The data server the sentinels name as master now (the first sentinel
-- that answers), or nil.
function _M.sentinel_master(ctx)
    for _, s in ipairs(ctx.sentinels) do
        local a = s:master_addr(NAME)
        if a then
            for _, srv in ipairs(ctx.data) do
                if addr(srv) == a then return srv end
            end
        end
    end
    return nil
end

-- config lines without replicaof, plus replicaof master unless it is srv
local function role_config(srv, master)
    local config = {}
    for _, l in ipairs(srv.server.config or {}) do
        if not l:match("^replicaof ") then config[#config + 1] = l end
    end
    if master and master ~= srv then
        config[#config + 1] = "replicaof " .. master.server.host .. " " .. master.server.port
    end
    srv.server.config = config
end

--- A restart in a Sentinel group: as the master when the sentinels still
-- name it, else as a replica of the one they name.
function _M.sentinel_restart(ctx, srv, keep)
    role_config(srv, _M.sentinel_master(ctx))
    topology.start(srv, keep)
end

--- Waits (up to 40 s) until the sentinels agree on a master that says it
-- is one, and the other data server replicates from it with its link up.
function _M.sentinel_settle(ctx)
    local ok = helper.eventually(40000, function()
        local m
        for _, s in ipairs(ctx.sentinels) do
            local a = s:master_addr(NAME)
            if not a or (m and a ~= m) then return false end
            m = a
        end
        for _, srv in ipairs(ctx.data) do
            local role = srv.server:cli("ROLE")
            if addr(srv) == m then
                if not role:match("^master") then return false end
            else
                local info = srv.server:cli("INFO", "replication")
                if not info:find("master_link_status:up", 1, true)
                    or not info:find("master_host:" .. m:match("^(.*):"), 1, true) then
                    return false
                end
            end
        end
        return true
    end)
    if not ok then error("the Sentinel group did not settle after the fault") end
end

--- Waits up to ms for the sentinels to name another master than old;
-- returns whether they did.
function _M.sentinel_moved(ctx, old, ms)
    return helper.eventually(ms, function()
        local m = _M.sentinel_master(ctx)
        return m ~= nil and m ~= old
    end)
end

--- A Cluster of 3 masters and 3 replicas, each node in a namespace of its
-- own, every two joined. ctx gets data (the six nodes), cluster,
-- lock_servers and cli_servers.
function _M.cluster(ctx)
    local t = ctx.topo
    local spaces = {}
    for i = 1, 6 do spaces[i] = t:space("n" .. i) end
    for i = 1, 6 do
        for j = i + 1, 6 do t.net:link("n" .. i, "n" .. j) end
    end
    local nodes, addrs = {}, {}
    for i = 1, 6 do
        nodes[i] = t:data_server("n" .. i, { space = spaces[i], config = { "cluster-enabled yes",
            "cluster-config-file nodes.conf", "cluster-node-timeout 2000", "cluster-require-full-coverage no",
            "cluster-announce-ip " .. spaces[i].addr } })
        addrs[i] = addr(nodes[i])
    end
    local out = helper.read_cmd("env -u LD_PRELOAD redis-cli --cluster create " .. table.concat(addrs, " ")
        .. " --cluster-replicas 1 --cluster-yes 2>&1")
    assert(out:find("All 16384 slots covered", 1, true), "redis-cli --cluster create failed:\n" .. out)
    for _, n in ipairs(nodes) do n.id = n.server:cli("CLUSTER", "MYID") end
    ctx.data = nodes
    local servers = {}
    for i, n in ipairs(nodes) do servers[i] = n.server end
    ctx.cluster = { nodes = servers }
    _M.cluster_settle(ctx)
    ctx.lock_servers = { "redis+cluster://" .. table.concat(addrs, ",", 1, 3) }
    ctx.cli_servers = ctx.lock_servers
end

-- The node record of a helper server.
local function node_of(ctx, server)
    for _, n in ipairs(ctx.data) do
        if n.server == server then return n end
    end
end

--- The node that serves key now (from a node's CLUSTER NODES).
function _M.owner(ctx, key)
    local server = helper.cluster_owner(ctx.cluster, key)
    return server and node_of(ctx, server)
end

-- CLUSTER NODES as one alive node sees it: { {id, addr, flags, master}, ... }
local function view(ctx)
    for _, n in ipairs(ctx.data) do
        if topology.alive(n) then
            local out = {}
            for line in n.server:cli("CLUSTER", "NODES"):gmatch("[^\n]+") do
                local id, a, flags, master = line:match("^(%S+) (%S+) (%S+) (%S+)")
                if id then out[#out + 1] = { id = id, addr = a:match("^[^@]+"), flags = flags, master = master } end
            end
            if #out > 0 then return out end
        end
    end
    return {}
end

--- The replica of master node n, or nil.
function _M.replica_of(ctx, n)
    for _, line in ipairs(view(ctx)) do
        if line.master == n.id and line.flags:find("slave", 1, true) and not line.flags:find("fail", 1, true) then
            for _, other in ipairs(ctx.data) do
                if addr(other) == line.addr then return other end
            end
        end
    end
end

--- Waits up to ms until node n is a replica (its replica took over).
function _M.cluster_demoted(ctx, n, ms)
    return helper.eventually(ms, function()
        for _, line in ipairs(view(ctx)) do
            if line.id == n.id then return line.flags:find("slave", 1, true) ~= nil end
        end
        return false
    end)
end

--- Waits (up to 40 s) until every node is up and says cluster_state:ok,
-- no node is marked failing, and every key of the workload is served by
-- a master.
function _M.cluster_settle(ctx, keys)
    local ok = helper.eventually(40000, function()
        for _, n in ipairs(ctx.data) do
            if not topology.alive(n) then return false end
            if not n.server:cli("CLUSTER", "INFO"):find("cluster_state:ok", 1, true) then return false end
            local nodes = n.server:cli("CLUSTER", "NODES")
            if nodes:find("fail", 1, true) then return false end
        end
        for _, k in ipairs(keys or {}) do
            local o = _M.owner(ctx, k)
            if not o or not o.server:cli("ROLE"):match("^master") then return false end
        end
        return true
    end)
    if not ok then error("the Cluster did not settle after the fault") end
end

return _M
