--- The nemesis's faults: a table of them, each with the modes it applies
-- to (its weight there), the targets it may hit, the draw of its
-- parameters from the run's random stream, inject and heal. A fault
-- whose outcome docs/guarantees.md does not promise (data lost, a clock
-- stepped, an asynchronous failover) says so in taints(ctx, params): the
-- checker counts the overlaps it lets in instead of failing on them.
--
-- ctx (torture/run.lua): topo, data (the data server records), mode,
-- max_ttl, procs (the workload's processes), cli(srv, ...), and the
-- mode's hooks (restart, master, settle).
local helper = require "helper"
local topology = require "torture.topology"
local groups = require "torture.groups"
local core = require "redlock.core"

local _M = {}

local function sleep(ms) core.sleep(ms) end

-- the data servers, by name (the mode may narrow them: faults.lua asks
-- ctx.targets_for(kind) first)
local function data_targets(ctx)
    local t = {}
    for _, srv in ipairs(ctx.data) do t[#t + 1] = srv.name end
    return t
end

local function srv_of(ctx, name)
    if name == "master" then return ctx.master() end
    return ctx.topo.servers[name]
end

local function restart(ctx, srv, keep)
    if ctx.mode.restart then return ctx.mode.restart(ctx, srv, keep) end
    topology.start(srv, keep)
end

--- Every fault, by name.
_M.list = {}
local F = _M.list

-- Freezes a server (SIGSTOP) and thaws it. Where a longer silence makes
-- a failover (Sentinel, Cluster), the mode's pause_max keeps it shorter.
F.pause_server = {
    targets = data_targets,
    draw = function(ctx, rng) return { len = rng:int(200, ctx.mode.pause_max or 3000) } end,
    inject = function(ctx, p) srv_of(ctx, p.target).server:freeze() end,
    heal = function(ctx, p) srv_of(ctx, p.target).server:thaw() end,
}

-- A server that stalls again and again: frozen for 30 to 300 ms, thawed for
-- as long, ten times (timeouts that end as the server answers late: late
-- takes and take-backs, retries on new connections).
F.pause_burst = {
    targets = data_targets,
    draw = function(_, rng)
        local steps, len = {}, 0
        for i = 1, 20 do
            steps[i] = rng:int(30, 300)
            len = len + steps[i]
        end
        return { len = 0, steps = steps, total = len }
    end,
    inject = function(ctx, p)
        local s = srv_of(ctx, p.target).server
        for i, ms in ipairs(p.steps) do
            if i % 2 == 1 then s:freeze() else s:thaw() end
            sleep(ms)
        end
        s:thaw()
    end,
    heal = function(ctx, p) srv_of(ctx, p.target).server:thaw() end,
}

-- Freezes a workload process past its longest ttl: a plain client, the
-- command's loop (with the redlock process and the command it runs),
-- an nginx worker (often inside an acquire).
F.pause_client = {
    targets = function(ctx)
        local t = {}
        for _, p in ipairs(ctx.procs) do
            if p.pausable then t[#t + 1] = p.name end
        end
        return t
    end,
    draw = function(ctx, rng) return { len = rng:int(ctx.min_ttl, ctx.max_ttl + 1500) } end,
    inject = function(ctx, p) p.pid = ctx.proc(p.target).signal("STOP") end,
    heal = function(ctx, p) ctx.proc(p.target).signal("CONT", p.pid) end,
}

-- SIGKILL and a restart on the same address. keep: with its AOF
-- (appendfsync always: nothing acknowledged is lost); lost: the AOF
-- deleted first (every key gone); delayed (Redlock): lost, but down for
-- the longest ttl first, the restart the algorithm asks for.
local function kill_restart(keep, delayed)
    return {
        targets = function(ctx) return ctx.restart_targets and ctx.restart_targets() or data_targets(ctx) end,
        draw = function(ctx, rng)
            local len = rng:int(0, ctx.mode.down_max or 1500)
            if delayed then len = ctx.max_ttl + rng:int(200, 1000) end
            return { len = len }
        end,
        inject = function(ctx, p)
            local srv = srv_of(ctx, p.target)
            p.server = srv.name
            p.was_master = srv.server:cli("ROLE"):match("^master") ~= nil
            topology.kill(srv)
        end,
        heal = function(ctx, p) restart(ctx, ctx.topo.servers[p.server], keep) end,
        -- (a replica that lost its data copies it again from its master)
        taints = (not keep and not delayed) and function(_, p)
            if p.was_master then return { lease = true, counter = true } end
        end or nil,
    }
end
F.restart_kept = kill_restart(true)
F.restart_lost = kill_restart(false)
F.restart_delayed = kill_restart(false, true)

-- The links between a server and every client cut (not those between
-- servers: the sentinels and replicas still see it).
F.partition_server = {
    targets = data_targets,
    draw = function(_, rng) return { len = rng:int(300, 3000) } end,
    inject = function(ctx, p)
        local srv = srv_of(ctx, p.target)
        p.space = srv.space.name
        ctx.topo.net:cut("client", p.space)
        for _, c in ipairs(ctx.topo.client_spaces) do ctx.topo.net:cut(c.name, p.space) end
    end,
    heal = function(ctx, p)
        ctx.topo.net:heal("client", p.space)
        for _, c in ipairs(ctx.topo.client_spaces) do ctx.topo.net:heal(c.name, p.space) end
    end,
}

-- A client in a namespace of its own cut from every server (it keeps
-- the resource: a unix socket).
F.partition_client = {
    targets = function(ctx)
        local t = {}
        for _, c in ipairs(ctx.topo.client_spaces) do t[#t + 1] = c.name end
        return t
    end,
    draw = function(_, rng) return { len = rng:int(300, 3000) } end,
    inject = function(ctx, p)
        for _, s in ipairs(ctx.topo.spaces) do ctx.topo.net:cut(p.target, s.name) end
    end,
    heal = function(ctx, p)
        for _, s in ipairs(ctx.topo.spaces) do ctx.topo.net:heal(p.target, s.name) end
    end,
}

-- A server's wall clock stepped forward or back (by one to three of the
-- longest ttls), then back to the real time: Redis expires keys by it.
F.clock_jump = {
    targets = data_targets,
    draw = function(ctx, rng)
        local j = rng:int(ctx.max_ttl, 3 * ctx.max_ttl) / 1000
        if rng:chance(0.5) then j = -j end
        return { len = rng:int(300, 3000), jump = j }
    end,
    inject = function(ctx, p) topology.set_clock(srv_of(ctx, p.target), p.jump) end,
    heal = function(ctx, p) topology.set_clock(srv_of(ctx, p.target), 0) end,
    taints = function(_, p) return { lease = true, clock = p.jump } end,
}

-- Every normal client connection of a server killed (CLIENT KILL).
F.client_kill = {
    targets = data_targets,
    draw = function() return { len = 0 } end,
    inject = function(ctx, p) srv_of(ctx, p.target).server:cli("CLIENT", "KILL", "TYPE", "normal") end,
    heal = function() end,
}

-- The server busy in one command (DEBUG SLEEP): connected, silent.
F.debug_sleep = {
    targets = data_targets,
    draw = function(ctx, rng) return { len = rng:int(100, ctx.mode.pause_max or 2500) } end,
    inject = function(ctx, p)
        local s = srv_of(ctx, p.target).server
        p.name = s.name
        -- in the background: the call answers when the sleep ends
        local cmd = string.format("env -u LD_PRELOAD %sredis-cli -h %s -p %d DEBUG SLEEP %.3f >/dev/null 2>&1 &",
            s.exec or "", s.host, s.port, p.len / 1000)
        os.execute(cmd)
    end,
    heal = function() end,
}

-- maxmemory just under what the server uses, with an evicting policy
-- and junk written to push it over: Redis evicts keys, lock keys too.
F.eviction = {
    targets = data_targets,
    draw = function(_, rng) return { len = rng:int(300, 2000) } end,
    inject = function(ctx, p)
        local s = srv_of(ctx, p.target)
        p.server = s.name
        p.was_master = s.server:cli("ROLE"):match("^master") ~= nil
        local used = tonumber(s.server:cli("INFO", "memory"):match("used_memory:(%d+)")) or 2e6
        s.server:cli("CONFIG", "SET", "maxmemory-policy", "allkeys-random")
        s.server:cli("CONFIG", "SET", "maxmemory", string.format("%d", used + 200000))
        local before = tonumber(s.server:cli("INFO", "stats"):match("evicted_keys:(%d+)")) or 0
        p.before = before
        -- ~400 KB of junk in one pipe
        local lines = {}
        for i = 1, 100 do lines[#lines + 1] = string.format("SET torture:junk:%d %s", i, string.rep("j", 4000)) end
        local f = io.popen(string.format("env -u LD_PRELOAD %sredis-cli -h %s -p %d >/dev/null 2>&1",
            s.server.exec or "", s.server.host, s.server.port), "w")
        f:write(table.concat(lines, "\n"), "\n")
        f:close()
    end,
    heal = function(ctx, p)
        local s = ctx.topo.servers[p.server]
        local after = tonumber(s.server:cli("INFO", "stats"):match("evicted_keys:(%d+)")) or 0
        p.evicted = after - (p.before or 0)
        s.server:cli("CONFIG", "SET", "maxmemory", "0")
        s.server:cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
        local keys = {}
        for i = 1, 100 do keys[i] = "torture:junk:" .. i end
        s.server:cli("DEL", (table.unpack or unpack)(keys))
    end,
    -- (a replica does not evict: its master's deletions come to it)
    taints = function(_, p)
        if p.was_master then return { lease = true, counter = true } end
    end,
}

-- Where a failover may lose acknowledged writes (replication is
-- asynchronous; not with replicas = 1 and one replica: every lock was
-- acknowledged by the replica promoted).
local function failover_taints(ctx)
    if ctx.mode.async then return { lease = true, counter = true } end
end

-- A Sentinel failover asked for (SENTINEL FAILOVER), waited for.
F.failover = {
    targets = function() return { "master" } end,
    draw = function() return { len = 0 } end,
    inject = function(ctx, p)
        local m = ctx.master()
        p.server = m.name
        -- (a sentinel refuses while it finds no good replica yet, e.g. one
        -- just restarted: asked again for a while)
        helper.eventually(10000, function()
            p.reply = ctx.sentinels[1]:cli("SENTINEL", "FAILOVER", groups.NAME)
            return p.reply == "OK"
        end)
        p.moved = groups.sentinel_moved(ctx, m, 20000)
    end,
    heal = function() end,
    taints = failover_taints,
}

-- The master killed, its replica promoted by the sentinels, then the old
-- master started again (with its data), to rejoin as a replica.
F.kill_master = {
    targets = function() return { "master" } end,
    draw = function() return { len = 0 } end,
    inject = function(ctx, p)
        local m = ctx.master()
        p.server = m.name
        topology.kill(m)
        p.moved = groups.sentinel_moved(ctx, m, 20000)
    end,
    heal = function(ctx, p) restart(ctx, ctx.topo.servers[p.server], true) end,
    taints = failover_taints,
}

-- The master cut from the sentinels and its replica, not from the
-- clients, until the sentinels have promoted the replica and len more;
-- healed, the old master rejoins as a replica (what it took meanwhile is
-- lost).
F.split_brain = {
    targets = function() return { "master" } end,
    draw = function(_, rng) return { len = rng:int(0, 2000) } end,
    inject = function(ctx, p)
        local m = ctx.master()
        p.server = m.name
        p.cut = {}
        for _, srv in ipairs(ctx.data) do
            if srv ~= m then p.cut[#p.cut + 1] = srv.space.name end
        end
        p.cut[#p.cut + 1] = "sen"
        for _, a in ipairs(p.cut) do ctx.topo.net:cut(a, m.space.name) end
        p.moved = groups.sentinel_moved(ctx, m, 20000)
    end,
    heal = function(ctx, p)
        local m = ctx.topo.servers[p.server]
        for _, a in ipairs(p.cut) do ctx.topo.net:heal(a, m.space.name) end
    end,
    taints = failover_taints,
}

-- A workload key's Cluster master, by the draw.
local function key_owner(ctx, p) return groups.owner(ctx, ctx.mode.plan.keys[p.key] or ctx.mode.plan.permit_key) end

local function key_draw(len)
    return function(ctx, rng)
        return { len = len, key = rng:int(1, #ctx.mode.plan.keys + 1), other = rng:int(1, 2) }
    end
end

-- CLUSTER FAILOVER on the replica of a key's master (the manual failover:
-- the master stops its clients until the replica has caught up).
F.cluster_failover = {
    targets = function() return { "key" } end,
    draw = key_draw(0),
    inject = function(ctx, p)
        local n = key_owner(ctx, p)
        p.server = n.name
        local r = groups.replica_of(ctx, n)
        if not r then return end
        p.replica = r.name
        r.server:cli("CLUSTER", "FAILOVER")
        p.moved = groups.cluster_demoted(ctx, n, 20000)
    end,
    heal = function() end,
}

-- A key's Cluster master killed until its replica took over, then
-- started again (with its data) to rejoin as a replica.
F.cluster_kill = {
    targets = function() return { "key" } end,
    draw = key_draw(0),
    inject = function(ctx, p)
        local n = key_owner(ctx, p)
        p.server = n.name
        local r = groups.replica_of(ctx, n)
        topology.kill(n)
        if r then
            p.replica = r.name
            p.moved = helper.eventually(20000, function() return r.server:cli("ROLE"):match("^master") ~= nil end)
        end
    end,
    heal = function(ctx, p) restart(ctx, ctx.topo.servers[p.server], true) end,
    taints = failover_taints,
}

-- A key's slot moved to another master (IMPORTING, MIGRATING, its keys
-- MIGRATEd in two rounds 200 ms apart, the slot given to the new master).
F.reshard = {
    targets = function() return { "key" } end,
    draw = key_draw(0),
    inject = function(ctx, p)
        local k = ctx.mode.plan.keys[p.key] or ctx.mode.plan.permit_key
        local src = groups.owner(ctx, k)
        local others = {}
        for _, n in ipairs(ctx.data) do
            if n ~= src and n.server:cli("ROLE"):match("^master") then others[#others + 1] = n end
        end
        table.sort(others, function(a, b) return a.name < b.name end)
        local dst = others[(p.other - 1) % #others + 1]
        p.server, p.to = src.name, dst.name
        local slot = tonumber(src.server:cli("CLUSTER", "KEYSLOT", k))
        p.slot = slot
        helper.move_slot(ctx.cluster, slot, src.server, dst.server, 200)
    end,
    heal = function() end,
}

--- The faults a mode injects, with their weights: mode.faults.
--- A fault drawn: its name, its parameters (target among them).
function _M.draw(ctx, rng)
    local name = rng:weighted(ctx.mode.faults)
    local f = F[name]
    local p = f.draw(ctx, rng)
    p.target = rng:pick(f.targets(ctx))
    p.kind = name
    return f, p
end

_M.sleep = sleep
_M.srv_of = srv_of
_M.helper = helper

return _M
