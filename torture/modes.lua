--- The modes of a torture run: a table of them, each with its servers
-- (setup), the workload's kinds and clients, the client options, the
-- faults it draws (by weight) and the hooks of its topology.
local helper = require "helper"
local topology = require "torture.topology"
local groups = require "torture.groups"

local _M = {}

local KEYS = { "t:x1", "t:x2", "t:x3" }

local function plan(kinds)
    return {
        kinds = kinds, keys = KEYS, permit_key = "t:p1", limit = 2,
        ttls = { 500, 1000, 2000 }, waits = { 0, 300, 1500 },
        styles = { plain = 6, extend = 2, renew = 1, with_lock = 1 },
    }
end

local ALL_KINDS = { lock = 4, reader = 2, group = 2, permit = 2 }

-- The faults of one server as far as a lock goes (one, legacy, nginx).
local ONE_FAULTS = {
    pause_server = 2, pause_burst = 1, pause_client = 3, restart_kept = 2, restart_lost = 1, partition_server = 2,
    partition_client = 2, clock_jump = 2, client_kill = 2, debug_sleep = 2, eviction = 1,
}

local function url(srv) return srv.server:url() end

_M.one = {
    title = "one server",
    setup = function(ctx)
        local s1 = ctx.topo:data_server("s1")
        ctx.data = { s1 }
        ctx.lock_servers = { url(s1) }
        ctx.cli_servers = { url(s1) }
    end,
    plan = plan(ALL_KINDS),
    workload = { plain = 2, plain_ns = 1, cli = 1, nginx = { workers = 2, streams = 2 } },
    faults = ONE_FAULTS,
}

_M.legacy = {
    title = "legacy mode",
    setup = function(ctx)
        -- scripting renamed away: mode "auto" finds legacy mode
        local config = {}
        for _, c in ipairs({ "EVAL", "EVALSHA", "SCRIPT", "FUNCTION", "FCALL", "FCALL_RO", "EVAL_RO",
            "EVALSHA_RO" }) do
            config[#config + 1] = "rename-command " .. c .. " \"\""
        end
        local s1 = ctx.topo:data_server("s1", { config = config })
        ctx.data = { s1 }
        ctx.lock_servers = { url(s1) }
        ctx.cli_servers = { url(s1) }
    end,
    plan = plan({ lock = 1 }),
    -- (every other client forces the mode rather than finding it)
    client_opts = function(i) return i % 2 == 0 and { mode = "legacy" } or {} end,
    workload = { plain = 2, plain_ns = 1, cli = 1 },
    faults = ONE_FAULTS,
}

-- (mostly single locks, waits up to 3 s, many requests at once: waiters
-- queued long in a worker frozen in their acquire, as issue 49 found)
local NGINX_PLAN = plan({ lock = 6, reader = 2, group = 1, permit = 2 })
NGINX_PLAN.ttls, NGINX_PLAN.waits = { 500, 700, 1000, 2000 }, { 0, 300, 1500, 3000 }
-- half the requests: every one a lock of one more key, ttl 700 ms, wait 3 s
NGINX_PLAN.focus = { kinds = { lock = 1 }, keys = { "t:x0" }, ttls = { 700 }, waits = { 3000 },
    styles = { plain = 1 } }

_M.nginx = {
    title = "inside nginx",
    setup = _M.one.setup,
    plan = NGINX_PLAN,
    workload = { plain = 1, nginx = { workers = 4, streams = 8 } },
    faults = {
        pause_server = 2, pause_burst = 1, pause_client = 8, restart_kept = 2, restart_lost = 1, partition_server = 2,
        clock_jump = 1, client_kill = 2, debug_sleep = 2, eviction = 1,
    },
}

_M.redlock = {
    title = "Redlock (3 masters)",
    setup = function(ctx)
        ctx.data, ctx.lock_servers, ctx.cli_servers = {}, {}, {}
        for i = 1, 3 do
            local s = ctx.topo:data_server("s" .. i)
            ctx.data[i] = s
            ctx.lock_servers[i] = url(s)
            ctx.cli_servers[i] = url(s)
        end
    end,
    -- (no semaphores over Redlock: refused)
    plan = plan({ lock = 4, reader = 2, group = 2 }),
    -- the fan-out's per-server limit: its default (ttl/200, 10 ms at
    -- least) is missed on a loaded 2-core machine
    client_opts = function() return { server_timeout = 100 } end,
    workload = { plain = 2, plain_ns = 1, cli = 1, nginx = { workers = 2, streams = 2 } },
    faults = {
        pause_server = 2, pause_burst = 3, pause_client = 3, restart_kept = 2, restart_lost = 1,
        restart_delayed = 2, partition_server = 2, partition_client = 2, clock_jump = 2, client_kill = 2,
        debug_sleep = 2, eviction = 1,
    },
    fence_spread = true,
}

-- A Sentinel group: what one server's faults do there, and its own.
local SENTINEL_FAULTS = {
    pause_server = 2, pause_client = 2, restart_kept = 1, restart_lost = 1, partition_server = 2,
    partition_client = 1, clock_jump = 1, client_kill = 1, debug_sleep = 1, eviction = 1, failover = 2,
    kill_master = 2, split_brain = 2,
}

local function sentinel_mode(title, opts, cli_args, async)
    return {
        title = title,
        setup = groups.sentinel,
        plan = plan(ALL_KINDS),
        client_opts = function() return opts end,
        cli_args = cli_args,
        workload = { plain = 2, plain_ns = 1, cli = 1 },
        faults = SENTINEL_FAULTS,
            -- (shorter than down-after-milliseconds: a failover is its own fault)
        pause_max = 800, down_max = 600,
        async = async,
        master = groups.sentinel_master,
        restart = groups.sentinel_restart,
        settle = function(ctx) groups.sentinel_settle(ctx) end,
        leftover_servers = function(ctx) return { groups.sentinel_master(ctx) } end,
        taint_server = function() return "group" end,
    }
end

_M.sentinel = sentinel_mode("Sentinel", {}, {}, true)
_M.replicas = sentinel_mode("Sentinel, `replicas = 1`", { replicas = 1, replica_timeout = 500 },
    { "--replicas", "1", "--replica-timeout", "500" }, false)

_M.cluster = {
    title = "Cluster",
    setup = groups.cluster,
    plan = plan(ALL_KINDS),
    workload = { plain = 2, plain_ns = 1, cli = 1 },
    faults = {
        pause_server = 2, pause_client = 2, restart_kept = 1, restart_lost = 1, partition_server = 2,
        partition_client = 1, clock_jump = 1, client_kill = 1, debug_sleep = 1, cluster_failover = 2,
        cluster_kill = 2, reshard = 3,
    },
    -- (shorter than cluster-node-timeout: a failover is its own fault)
    pause_max = 1500, down_max = 1000,
    async = true,
    settle = function(ctx)
        local keys = { _M.cluster.plan.permit_key }
        for _, k in ipairs(KEYS) do keys[#keys + 1] = k end
        groups.cluster_settle(ctx, keys)
    end,
    leftover_servers = function(ctx)
        local out = {}
        for _, n in ipairs(ctx.data) do
            if n.server:cli("ROLE"):match("^master") then out[#out + 1] = n end
        end
        return out
    end,
    taint_server = function() return "group" end,
}

--- The mode names in the order a full run takes them.
_M.ORDER = { "one", "replicas", "sentinel", "cluster", "redlock", "legacy", "nginx" }

_M.helper, _M.topology = helper, topology

return _M
