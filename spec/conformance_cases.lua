--- Conformance of the topology rules, run by spec/24-conformance_cluster_spec.lua
-- and spec/24-conformance_sentinel_spec.lua (the cases of one topology each, side
-- by side; each starts the fixture of its own): the same cases (MOVED, ASK, TRYAGAIN,
-- CLUSTERDOWN twice, a Cluster failover, CLUSTER SLOTS refused by one node,
-- a Sentinel failover, sentinels that name a replica, a hung sentinel) run
-- through every path that reaches Redis: the plain client (hiredis), alone
-- and waiting for a replica, the Redlock fan-out with the topology as one
-- voter, the renewal thread of one server and of a Redlock, nginx's
-- cosockets, and nginx's renewal from timers (spec/conformance.lua has the
-- drivers). Each case says
-- once what must come out, and a table of case x driver makes one test of
-- each cell. Real servers only: one Cluster (3 masters, 1 replica each) and
-- one Sentinel group, shared by the cases, in the order below (the
-- failovers change them for the cases after).
--
-- A cell where a path does not do today what the case asks is pending
-- ("differs today: ...") rather than failing: REDLOCK_CONFORMANCE_ALL=1 runs
-- those cells too, to see which now pass. A cell that cannot apply to a
-- path is pending with "n/a".
local helper = require "helper"
local conf = require "conformance"
local util = require "redlock.util"
local now = require("redlock.core").now

local ALL = os.getenv("REDLOCK_CONFORMANCE_ALL")

local fx -- the fixture (conformance.start)
local key = conf.key
local function owner(k) return (helper.cluster_owner(fx.cluster, k)) end
local function get(node, k) return node:cli("GET", k) end

-- The slot migration of helper.move_slot, finished (IMPORTING and
-- MIGRATING may be set already).
local function finish_move(slot, from, to) helper.move_slot(fx.cluster, slot, from, to) end

-- A sentinel's answer for `name` made `node`, at run time.
local function monitor(sentinel, name, node)
    sentinel:cli("SENTINEL", "REMOVE", name)
    assert(sentinel:cli("SENTINEL", "MONITOR", name, "127.0.0.1", node.port, "1") == "OK")
    -- (no failover of its own while it names a replica)
    sentinel:cli("SENTINEL", "SET", name, "down-after-milliseconds", "60000")
    assert.equal("127.0.0.1:" .. node.port, sentinel:master_addr(name))
end

-- The cases, in the order they run. Fields:
--   topology   "cluster" or "sentinel": which URL the drivers use (url(s)
--              overrides it), and which voter the fan-out watches
--   shared     one event for every driver (prepared all first), else one
--              per driver
--   warm       a request driver takes and releases the lock once before the
--              event (its client then knows the topology as it was)
--   renew_ttl, renew_warm, renew_wait
--              the renewal driver's lock, whether a renewal is made before
--              the event (default: warm), how long it is held after
--              (both in ms, scaled by helper.ms)
--   op         "acquire" (default: a try_acquire after the event) or
--              "extend" (of a lock taken before the event, with hold_ttl;
--              extended to extend_ttl)
--   setup(s)   once, before the case's first cell (s: the case's state)
--   prepare(s, d, ctx)   per driver: ctx.key at least
--   event(s, ctx, d)     the topology event (shared: ctx and d are nil)
--   check(s, ctx, obs, d)   THE assertion, the same for every driver
--   restore(s, ctx, d)   after each cell's check (per driver), or once
--              after the case (shared)
--   fanout_default_budget   the fan-out driver keeps its default time limit
--              per voter (else 1000 ms, the other drivers' timeout)
--   replicas, replica_timeout   every driver's client waits for replicas
--   sentinel_check   every driver's client asks the sentinels this rarely
--   teardown(s)   once, after the case
--   differs    driver name -> what it does today instead (pending cells)
--   na         driver name -> why the case cannot apply
local cases = {}

cases[#cases + 1] = {
    name = "MOVED: the slot moved to another master after the client loaded the map",
    topology = "cluster", shared = true, warm = true,
    setup = function(s)
        s.tag = "{" .. key("moved") .. "}"
        s.from, s.slot = helper.cluster_owner(fx.cluster, s.tag)
        s.to = conf.other_master(fx, s.from)
    end,
    prepare = function(s, d, ctx) ctx.key = s.tag .. d.name end,
    event = function(s) helper.move_slot(fx.cluster, s.slot, s.from, s.to) end,
    -- the command follows MOVED in the same call: taken, on the new master
    check = function(s, ctx, obs)
        assert.is_true(obs.ok, obs.err)
        assert.equal(obs.token, get(s.to, ctx.key))
    end,
}

cases[#cases + 1] = {
    name = "ASK: the lock key moved to the importing master, its slot still migrating",
    topology = "cluster", shared = true, warm = true, op = "extend", hold_ttl = 15000, extend_ttl = 60000,
    setup = function(s)
        s.tag = "{" .. key("ask") .. "}"
        s.from, s.slot = helper.cluster_owner(fx.cluster, s.tag)
        s.to = conf.other_master(fx, s.from)
    end,
    prepare = function(s, d, ctx) ctx.key = s.tag .. d.name end,
    event = function(s)
        assert.equal("OK", s.to:cli("CLUSTER", "SETSLOT", s.slot, "IMPORTING", s.from:cli("CLUSTER", "MYID")))
        assert.equal("OK", s.from:cli("CLUSTER", "SETSLOT", s.slot, "MIGRATING", s.to:cli("CLUSTER", "MYID")))
        -- the lock keys only: the slot's fence counter stays behind
        for _, k in ipairs(s.keys) do
            assert.equal("OK", s.from:cli("MIGRATE", "127.0.0.1", s.to.port, k, "0", "5000"))
        end
    end,
    -- the extend (one key) follows ASK to the importing master, after
    -- ASKING: the lock is extended there
    check = function(s, ctx, obs, d)
        assert.is_true(obs.ok, obs.err)
        local token, pttl = conf.asking(s.to, { "GET", ctx.key }, { "PTTL", ctx.key })
        assert.equal(obs.token, token)
        if not d.renews then assert.is_true(pttl > 15000, pttl .. " ms left: not extended") end
    end,
    restore = function(s) finish_move(s.slot, s.from, s.to) end,
}

cases[#cases + 1] = {
    name = "TRYAGAIN: a new lock in a slot that migrates, its fence counter still on the old master",
    topology = "cluster", warm = true,
    na = {
        renew = "the renewal thread only extends: a one-key script, which a migrating slot runs or "
            .. "answers ASK, never TRYAGAIN (only acquire and release carry two keys or more)",
        renew_redlock = "as renew: the renewal thread only extends (one key), never TRYAGAIN",
        nginx_renew = "as renew: the renewal from timers only extends (one key), never TRYAGAIN",
    },
    prepare = function(_, d, ctx)
        ctx.key = "{" .. key("try") .. "}" .. d.name
        ctx.from, ctx.slot = helper.cluster_owner(fx.cluster, ctx.key)
        ctx.to = conf.other_master(fx, ctx.from)
    end,
    -- (warm: the fence counter exists on the old master now) the lock key
    -- is missing and the counter is not: TRYAGAIN, on both masters, until
    -- the migration ends 300 ms later
    event = function(_, ctx)
        local from, to, slot = ctx.from, ctx.to, ctx.slot
        assert.equal("OK", to:cli("CLUSTER", "SETSLOT", slot, "IMPORTING", from:cli("CLUSTER", "MYID")))
        assert.equal("OK", from:cli("CLUSTER", "SETSLOT", slot, "MIGRATING", to:cli("CLUSTER", "MYID")))
        local counter = util.fence_counter(ctx.key, true)
        assert.equal(counter, from:cli("CLUSTER", "GETKEYSINSLOT", slot, "10"))
        local steps = { conf.cli_cmd(from, "MIGRATE", "127.0.0.1", to.port, counter, "0", "5000") }
        for _, m in ipairs(conf.masters(fx)) do
            steps[#steps + 1] = conf.cli_cmd(m, "CLUSTER", "SETSLOT", slot, "NODE", to:cli("CLUSTER", "MYID"))
        end
        conf.later(300, table.concat(steps, "; "))
    end,
    -- TRYAGAIN passes on its own: the command is sent again, after pauses,
    -- within the call's time; taken on the new master
    check = function(_, ctx, obs)
        assert.is_true(obs.ok, obs.err)
        assert.equal(obs.token, get(ctx.to, ctx.key))
    end,
    restore = function(_, ctx)
        assert(helper.eventually(5000, function() return owner(ctx.key) == ctx.to end), "the migration did not end")
    end,
}

local down = {
    name = "CLUSTERDOWN: the slot's master stops serving it for a moment (DELSLOTS, then ADDSLOTS)",
    topology = "cluster", warm = true, renew_ttl = 3000, renew_wait = 4000,
    prepare = function(_, d, ctx)
        -- a master that is not the first seed: the map reloaded from the
        -- first seed still names it (other nodes keep it as the owner)
        local first = conf.first_seed(fx)
        repeat
            ctx.key = "{" .. key("down") .. "}" .. d.name
            ctx.node, ctx.slot = helper.cluster_owner(fx.cluster, ctx.key)
        until ctx.node ~= first
    end,
    event = function(_, ctx, d)
        assert.equal("OK", ctx.node:cli("CLUSTER", "DELSLOTS", ctx.slot))
        assert.matches("^CLUSTERDOWN", get(ctx.node, ctx.key))
        conf.later(d.renews and helper.ms(1000) or 300, conf.cli_cmd(ctx.node, "CLUSTER", "ADDSLOTS", ctx.slot))
    end,
    -- CLUSTERDOWN passes on its own: sent again after pauses, within the
    -- call's time; taken on the master, serving again
    check = function(_, ctx, obs)
        assert.is_true(obs.ok, obs.err)
        assert.equal(obs.token, get(ctx.node, ctx.key))
    end,
    restore = function(_, ctx)
        assert(helper.eventually(5000, function() return not get(ctx.node, ctx.key):match("^CLUSTERDOWN") end),
            "the slot was not served again")
    end,
}
cases[#cases + 1] = down

cases[#cases + 1] = {
    name = "CLUSTERDOWN from the first seed: the map reloaded from it lacks the slot for a moment",
    topology = "cluster", warm = true, renew_ttl = 3000, renew_wait = 4000,
    -- (before the core's Cluster kind paused and reloaded here: a map
    -- without the slot counted as loaded, and a slot without a node as final)
    prepare = function(_, d, ctx)
        local first = conf.first_seed(fx)
        repeat
            ctx.key = "{" .. key("down1") .. "}" .. d.name
            ctx.node, ctx.slot = helper.cluster_owner(fx.cluster, ctx.key)
        until ctx.node == first
    end,
    -- the same transient state as CLUSTERDOWN, and the same outcome
    event = down.event, check = down.check, restore = down.restore,
}

cases[#cases + 1] = {
    name = "CLUSTER SLOTS refused by the first seed (ACL), answered by the next",
    topology = "cluster", warm = false,
    setup = function(s)
        local deny = fx.cluster.nodes[3]
        for _, node in ipairs(fx.cluster.nodes) do
            assert.equal("OK", node:cli("ACL", "SETUSER", "conform", "on", ">conform-pw", "~*", "&*", "+@all"))
        end
        assert.equal("OK", deny:cli("ACL", "SETUSER", "conform", "-cluster|slots"))
        -- (a seed list of its own: nginx keeps one slot map per seed list)
        s.url = "redis+cluster://conform:conform-pw@" .. fx.cluster.seeds[3] .. "," .. fx.cluster.seeds[4]
    end,
    url = function(s) return s.url end,
    prepare = function(_, _, ctx) ctx.key = key("slots") end,
    check = function(_, ctx, obs)
        assert.is_true(obs.ok, obs.err)
        assert.equal(obs.token, get(owner(ctx.key), ctx.key))
    end,
}

cases[#cases + 1] = {
    name = "a Cluster master killed, its replica promoted",
    topology = "cluster", shared = true, warm = true, renew_ttl = 6000, renew_wait = 6500,
    na = { acked = "the promoted master has no replica left to acknowledge a write" },
    setup = function(s)
        s.tag = "{" .. key("failover") .. "}"
        s.master = helper.cluster_owner(fx.cluster, s.tag)
        s.replica = conf.replica_of(fx, s.master)
    end,
    prepare = function(s, d, ctx) ctx.key = s.tag .. d.name end,
    event = function(s)
        -- the renewed lock is on the replica too
        assert(s.master:replicated_to(s.replica, 5000), "the replica did not catch up")
        s.master:kill()
        assert(helper.eventually(30000, function() return s.replica:cli("ROLE"):match("^master") ~= nil end),
            "the replica was not promoted")
        -- every node knows: the map a client reloads from any of them names
        -- the new master (a node that has not learned it yet is another case)
        local function line_of(nodes, node)
            return nodes:match("[^\n]* 127%.0%.0%.1:" .. node.port .. "@[^\n]*") or ""
        end
        assert(helper.eventually(20000, function()
            for _, node in ipairs(fx.cluster.nodes) do
                if helper.alive(node.pid) then
                    local nodes = node:cli("CLUSTER", "NODES")
                    if not node:cli("CLUSTER", "INFO"):find("cluster_state:ok", 1, true)
                        or not line_of(nodes, s.replica):find("master", 1, true)
                        or not line_of(nodes, s.master):find(" master,fail ", 1, true) then
                        return false
                    end
                end
            end
            return true
        end), "the Cluster did not agree on the new master")
    end,
    -- the next call finds the new master (the map reloaded after the
    -- connection failed): taken there; a renewed lock stays held there
    check = function(s, ctx, obs)
        assert.is_true(obs.ok, obs.err)
        assert.equal(obs.token, get(s.replica, ctx.key))
    end,
}

cases[#cases + 1] = {
    name = "a stale connection: the master closed its clients' connections (CLIENT KILL) while idle",
    topology = "sentinel", warm = true, renew_ttl = 1500, renew_wait = 1500,
    na = {
        nginx = "nginx closes a pooled connection as soon as the server closes it (its keepalive "
            .. "pool watches them): a pooled cosocket goes stale only in a race no test sets up",
        nginx_renew = "as nginx: its pooled connections are closed with the server's",
    },
    prepare = function(_, d, ctx)
        ctx.master = conf.sentinel_roles(fx)
        ctx.key = key("stale") .. d.name
    end,
    event = function(_, ctx) assert.matches("^%d+$", ctx.master:cli("CLIENT", "KILL", "TYPE", "normal")) end,
    -- nothing was sent on it: the command goes once more, on a new
    -- connection, within the same call (a try_acquire makes one try); a
    -- renewal misses no round
    check = function(_, ctx, obs, d)
        assert.is_true(obs.ok, obs.err)
        assert.equal(obs.token, get(ctx.master, ctx.key))
        if d.renews then assert.equal(0, obs.failures, obs.err) end
    end,
}

cases[#cases + 1] = {
    name = "NOSCRIPT: the master's script cache flushed (SCRIPT FLUSH) while a lock is held",
    topology = "sentinel", warm = true, op = "extend", hold_ttl = 15000, extend_ttl = 60000,
    renew_ttl = 1500, renew_wait = 2500,
    prepare = function(_, d, ctx)
        ctx.master = conf.sentinel_roles(fx)
        ctx.key = key("noscript") .. d.name
    end,
    event = function(_, ctx)
        ctx.evals = conf.calls(ctx.master, "eval")
        assert.equal("OK", ctx.master:cli("SCRIPT", "FLUSH"))
    end,
    -- EVALSHA answered NOSCRIPT: the script goes once by EVAL, on the same
    -- server, and the lock is extended (renewed) there
    check = function(_, ctx, obs, d)
        assert.is_true(obs.ok, obs.err)
        assert.equal(obs.token, get(ctx.master, ctx.key))
        assert.is_true(conf.calls(ctx.master, "eval") > ctx.evals, "no EVAL after NOSCRIPT")
        if not d.renews then
            local pttl = tonumber(ctx.master:cli("PTTL", ctx.key))
            assert.is_true(pttl > 15000, pttl .. " ms left: not extended")
        end
    end,
}

cases[#cases + 1] = {
    name = "replica acknowledgement: the master's replica frozen, WAIT answers 0 of 1",
    topology = "sentinel", warm = false, renew_warm = true, renew_ttl = 1500, renew_wait = 3000,
    replicas = 1, replica_timeout = 300,
    prepare = function(_, d, ctx)
        ctx.master, ctx.replica = conf.sentinel_roles(fx)
        ctx.key = key("acked") .. d.name
    end,
    event = function(_, ctx)
        if ctx.held then assert(ctx.master:replicated_to(ctx.replica, 5000), "the replica did not catch up") end
        ctx.replica:freeze()
    end,
    -- the write stands on the master alone: a lock is refused as not
    -- acknowledged ("replicas") and given back; a renewed one, never
    -- acknowledged again, is lost when its validity runs out
    check = function(_, ctx, obs, d)
        assert.is_false(obs.ok, "taken without the replica's acknowledgement")
        assert.matches("replicas: .*0 of 1 replicas acknowledged", obs.err)
        if d.renews then return end
        if obs.code then assert.equal("replicas", obs.code) end
        assert.equal("", get(ctx.master, ctx.key))
    end,
    restore = function(_, ctx)
        ctx.replica:thaw()
        assert(ctx.master:replicated_to(ctx.replica, 5000), "the replica did not catch up")
    end,
}

cases[#cases + 1] = {
    name = "READONLY: the master turned replica under a client connected to it, the sentinels name the new one",
    topology = "sentinel", warm = true, renew_ttl = 3000, renew_wait = 4500,
    -- (checked by the client every minute: only the refused write tells it)
    sentinel_check = 60000,
    na = {
        renew = "the renewal thread asks the sentinels twice per renewal interval, whatever "
            .. "sentinel_check says (csrc/drivers/renew_io.c's recheck_all): it follows the master before a "
            .. "write is refused",
        renew_redlock = "as renew: the thread asks the sentinels before a write is refused",
        nginx_renew = "as renew: nginx's timer renewal asks the sentinels twice per renewal interval too "
            .. "(redlock.nginx.cosocket's renew, the Sentinel kind's recheck)",
    },
    setup = function(s)
        s.a = helper.start_server()
        s.b = helper.start_replica(s.a)
        s.ro = helper.start_sentinel({ ro = s.a }, { quorum = 1 })
        monitor(s.ro, "ro", s.a)
        s.master, s.replica = s.a, s.b
    end,
    url = function(s) return conf.sentinel_url({ s.ro }, "ro") end,
    prepare = function(_, d, ctx) ctx.key = key("readonly") .. d.name end,
    event = function(s)
        assert(s.master:replicated_to(s.replica, 5000), "the replica did not catch up")
        -- the failover, by hand: the replica promoted, the master its replica,
        -- the sentinel naming the new master (no +switch-master said)
        assert.equal("OK", s.replica:cli("REPLICAOF", "NO", "ONE"))
        assert.equal("OK", s.master:cli("REPLICAOF", "127.0.0.1", s.replica.port))
        monitor(s.ro, "ro", s.replica)
        s.master, s.replica = s.replica, s.master
    end,
    -- the write refused (READONLY: nothing written) sends the client to the
    -- sentinels, and the lock is taken (kept) on the new master
    check = function(s, ctx, obs)
        assert.is_true(obs.ok, obs.err)
        assert.equal(obs.token, get(s.master, ctx.key))
    end,
    teardown = function(s)
        s.ro:stop()
        s.b:stop()
        s.a:stop()
    end,
}

cases[#cases + 1] = {
    name = "a Sentinel failover",
    topology = "sentinel", shared = true, warm = true, renew_ttl = 3000, renew_wait = 3500,
    setup = function(s) s.old, s.new = conf.sentinel_roles(fx) end,
    prepare = function(_, _, ctx) ctx.key = key("sfailover") end,
    event = function(s)
        -- the renewed lock is on the replica too
        assert(s.old:replicated_to(s.new, 5000), "the replica did not catch up")
        local new_addr = "127.0.0.1:" .. s.new.port
        assert.matches("^OK", fx.sentinels[1]:cli("SENTINEL", "FAILOVER", fx.name))
        assert(helper.eventually(20000, function()
            for _, sentinel in ipairs(fx.sentinels) do
                if sentinel:master_addr(fx.name) ~= new_addr then return false end
            end
            return true
        end), "the sentinels did not switch to the replica")
        assert(helper.eventually(20000, function() return s.old:cli("ROLE"):match("^slave") ~= nil end),
            "the old master was not turned into a replica")
        -- (replicating: the new master has a replica to acknowledge writes)
        assert(helper.eventually(20000, function()
            return s.old:cli("INFO", "replication"):find("master_link_status:up", 1, true) ~= nil
        end), "the old master did not start replicating the new one")
    end,
    -- once the old master is a replica, the next call lands on the new
    -- one; a renewed lock stays held there
    check = function(s, ctx, obs)
        assert.is_true(obs.ok, obs.err)
        assert.equal(obs.token, get(s.new, ctx.key))
    end,
}

cases[#cases + 1] = {
    name = "the sentinels name a replica: ROLE asked in three rounds, then an error, never a write there",
    topology = "sentinel", warm = false, renew_warm = true, renew_ttl = 1500, renew_wait = 3000,
    setup = function(s)
        local master = conf.sentinel_roles(fx)
        s.liar = helper.start_sentinel({ liar = master }, { quorum = 1 })
    end,
    url = function(s) return conf.sentinel_url({ s.liar }, "liar") end,
    prepare = function(s, _, ctx)
        ctx.master, ctx.replica = conf.sentinel_roles(fx)
        monitor(s.liar, "liar", ctx.master) -- (the renewal driver takes its lock there)
        ctx.key = key("liar")
    end,
    event = function(s, ctx)
        ctx.roles = conf.calls(ctx.replica, "role")
        ctx.evals = conf.calls(ctx.replica, "evalsha") + conf.calls(ctx.replica, "eval")
        monitor(s.liar, "liar", ctx.replica)
    end,
    check = function(_, ctx, obs)
        assert.is_false(obs.ok, "taken on a replica")
        assert.matches("not a master", obs.err)
        if obs.code then assert.equal("connection", obs.code) end
        local roles = conf.calls(ctx.replica, "role") - ctx.roles
        assert.is_true(roles > 0 and roles % 3 == 0, roles .. " ROLE calls, not rounds of three")
        assert.equal(ctx.evals, conf.calls(ctx.replica, "evalsha") + conf.calls(ctx.replica, "eval"))
    end,
    teardown = function(s) s.liar:stop() end,
}

cases[#cases + 1] = {
    name = "a hung sentinel (SIGSTOP), first in the list",
    topology = "sentinel", shared = true, warm = false, renew_warm = true, renew_ttl = 3000, renew_wait = 4000,
    -- (the fan-out with its default time limit: what that limit covers)
    fanout_default_budget = true,
    url = function() return conf.sentinel_url(fx.sentinels) end,
    prepare = function(_, _, ctx) ctx.key = key("hung") end,
    event = function() fx.sentinels[1]:freeze() end,
    -- the others answer: taken on the master, the hung one costing its
    -- short timeout
    check = function(_, ctx, obs)
        assert.is_true(obs.ok, obs.err)
        assert.equal(obs.token, get(conf.sentinel_roles(fx), ctx.key))
    end,
    restore = function() fx.sentinels[1]:thaw() end,
}

cases[#cases + 1] = {
    name = "the periodic check: the first sentinel hangs, the second names another master",
    topology = "sentinel", warm = true,
    fanout_default_budget = true,
    sentinel_check = helper.ms(600),
    na = {
        renew = "a renewal extends where its lock is: the master the sentinels name next has no copy "
            .. "of it (the thread's checks run the same core policy, csrc/drivers/sentinel.c)",
        renew_redlock = "as renew",
        nginx_renew = "as renew",
    },
    setup = function(s)
        -- two masters, each with a replica (the acked driver waits for one)
        s.a = helper.start_server()
        s.a2 = helper.start_replica(s.a)
        s.b = helper.start_server()
        s.b2 = helper.start_replica(s.b)
        s.first = helper.start_sentinel({ chk = s.a }, { quorum = 1 })
        s.second = helper.start_sentinel({ chk = s.a }, { quorum = 1 })
        monitor(s.first, "chk", s.a)
        monitor(s.second, "chk", s.a)
    end,
    url = function(s) return conf.sentinel_url({ s.first, s.second }, "chk") end,
    prepare = function(_, d, ctx) ctx.key = key("check") .. d.name end,
    event = function(s)
        s.first:freeze()
        monitor(s.second, "chk", s.b)
        helper.sleep(helper.ms(600) + 100) -- the next call checks
    end,
    -- the check asks the first sentinel only (the core's policy,
    -- redlock_sentinel_check): it fails, goes to the back, and the master in
    -- use stays; the next check, a sentinel_check later, asks the second,
    -- which names the other master, and the call after it goes there
    check = function(s, ctx, obs, d)
        assert.is_true(obs.ok, obs.err)
        assert.equal(obs.token, get(s.a, ctx.key))
        assert.equal("", get(s.b, ctx.key))
        helper.sleep(helper.ms(600) + 100)
        local k2 = ctx.key .. ":next"
        local nxt = d.acquire(fx, ctx, k2, 5000)
        assert.is_true(nxt.ok, nxt.err)
        ctx.next = nxt
        assert.equal(nxt.token, get(s.b, k2))
        assert.equal("", get(s.a, k2))
    end,
    restore = function(s, ctx, d)
        if ctx.next and ctx.next.ok then pcall(d.release, fx, ctx, ctx.next) end
        s.first:thaw()
        monitor(s.second, "chk", s.a)
    end,
    teardown = function(s)
        for _, node in ipairs({ s.first, s.second, s.b2, s.b, s.a2, s.a }) do node:stop() end
    end,
}

cases[#cases + 1] = {
    name = "a renewal follows the sentinels within its interval: the master moved, the old one still writable",
    topology = "sentinel", warm = false, renew_warm = true, renew_ttl = 1500, renew_wait = 3000,
    -- (a request's client asks every minute: only the renewal's own check,
    -- twice per interval, can follow in time)
    sentinel_check = 60000,
    na = {
        plain = "a request checks the sentinels every sentinel_check (a minute here): the case is the "
            .. "renewal's own check, twice per renewal interval",
        acked = "as plain", fanout = "as plain", nginx = "as plain",
    },
    setup = function(s)
        s.a = helper.start_server()
        s.b = helper.start_replica(s.a)
        s.sent = helper.start_sentinel({ moved = s.a }, { quorum = 1 })
        monitor(s.sent, "moved", s.a)
    end,
    url = function(s) return conf.sentinel_url({ s.sent }, "moved") end,
    prepare = function(_, d, ctx) ctx.key = key("moved") .. d.name end,
    event = function(s)
        assert(s.a:replicated_to(s.b, 5000), "the replica did not catch up")
        -- the replica promoted and named by the sentinel, the old master
        -- left a master (no READONLY tells the client; no +switch-master)
        assert.equal("OK", s.b:cli("REPLICAOF", "NO", "ONE"))
        monitor(s.sent, "moved", s.b)
    end,
    -- the renewal extended the lock on the master the sentinel names: its
    -- copy there did not run out
    check = function(s, ctx, obs)
        assert.is_true(obs.ok, obs.err)
        assert.equal(obs.token, get(s.b, ctx.key))
    end,
    restore = function(s, ctx)
        s.b:cli("DEL", ctx.key)
        assert.equal("OK", s.b:cli("REPLICAOF", "127.0.0.1", s.a.port))
        assert(helper.eventually(10000, function()
            return s.b:cli("INFO", "replication"):find("master_link_status:up", 1, true) ~= nil
        end), "the replica did not follow the master again")
        monitor(s.sent, "moved", s.a)
    end,
    teardown = function(s)
        for _, node in ipairs({ s.sent, s.b, s.a }) do node:stop() end
    end,
}

-- --- the runner ---------------------------------------------------------------

local function url_of(case, s)
    if case.url then return case.url(s) end
    if case.topology == "cluster" then return fx.cluster.url end
    -- the first sentinel last: the hung case puts it first
    return conf.sentinel_url({ fx.sentinels[2], fx.sentinels[3], fx.sentinels[1] })
end

-- Before the event: the driver's client, and its lock or its warm-up.
local function arm(case, s, d, ctx)
    ctx.url = url_of(case, s)
    ctx.default_budget = case.fanout_default_budget
    ctx.replicas, ctx.replica_timeout = case.replicas, case.replica_timeout
    ctx.sentinel_check = case.sentinel_check
    d.open(fx, ctx)
    case.prepare(s, d, ctx)
    if d.renews then
        local warm = case.renew_warm
        if warm == nil then warm = case.warm end
        ctx.held = d.hold(fx, ctx, ctx.key, helper.ms(case.renew_ttl or 1500), warm)
    elseif case.op == "extend" then
        ctx.held = d.acquire(fx, ctx, ctx.key, case.hold_ttl)
        assert(ctx.held.ok, ctx.held.err)
    elseif case.warm then
        local w = d.acquire(fx, ctx, ctx.key, 5000)
        assert(w.ok, w.err)
        d.release(fx, ctx, w)
    end
end

-- After the event: the driver's observation. (One event for all: the
-- renewal drivers after the first have held their locks that long already.)
local function act(case, s, d, ctx)
    if d.renews then
        local wait = helper.ms(case.renew_wait or 2500)
        if case.shared then wait = wait - (now() - s.event_at) end
        if wait > 0 then helper.sleep(wait) end
        return d.observe(fx, ctx, ctx.held)
    end
    if case.op == "extend" then return d.extend(fx, ctx, ctx.held, case.extend_ttl) end
    local obs = d.acquire(fx, ctx, ctx.key, 5000)
    if obs.ok then ctx.taken = obs end
    return obs
end

local function cleanup(d, ctx)
    for _, held in ipairs({ ctx.held, ctx.taken }) do
        if held and held.ok then pcall(d.release, fx, ctx, held) end
    end
    pcall(d.close, fx, ctx)
end

local skip_all = helper.lua54_only()

--- Defines the tests of the cases of topology ("cluster" or "sentinel").
return function(topology)
describe("Conformance of the topology rules (" .. topology .. ")", function()
    if skip_all then
        pending("skipped: " .. skip_all)
        return
    end

    local skips = {}
    for _, d in ipairs(conf.drivers) do skips[d.name] = d.skip and d.skip() or false end

    setup(function() fx = conf.start() end)
    teardown(function()
        for _, d in ipairs(conf.drivers) do
            if d.stop then d.stop() end
        end
        helper.stop_all()
    end)

    for _, case in ipairs(cases) do
        if case.topology == topology then describe(case.name, function()
            local s = {}      -- the case's own state
            local runs = {}   -- the drivers whose cells run
            for _, d in ipairs(conf.drivers) do
                local why = skips[d.name]
                local na = case.na and case.na[d.name]
                local differs = not ALL and case.differs and case.differs[d.name]
                if why then
                    pending(d.name .. ": skipped: " .. why)
                elseif na then
                    pending(d.name .. ": n/a: " .. na)
                elseif differs then
                    pending(d.name .. ": differs today: " .. differs)
                else
                    runs[#runs + 1] = d
                end
            end
            if #runs == 0 then return end

            local ctxs = {}
            local function once()
                if s.ready then return end
                s.ready = true
                if case.setup then case.setup(s) end
                if case.shared then
                    -- every driver armed, one event for all
                    s.keys = {}
                    for _, d in ipairs(runs) do
                        local ctx = {}
                        ctxs[d] = ctx
                        arm(case, s, d, ctx)
                        s.keys[#s.keys + 1] = ctx.key
                    end
                    if case.event then case.event(s) end
                    s.event_at = now()
                end
            end

            teardown(function()
                if s.ready and case.shared and case.restore then pcall(case.restore, s) end
                for d, ctx in pairs(ctxs) do cleanup(d, ctx) end
                if s.ready and case.teardown then case.teardown(s) end
            end)

            for _, d in ipairs(runs) do
                it(d.name, function()
                    once()
                    local ctx = ctxs[d]
                    if not case.shared then
                        ctx = {}
                        s.keys = nil
                        finally(function()
                            if case.restore then case.restore(s, ctx, d) end
                            cleanup(d, ctx)
                        end)
                        arm(case, s, d, ctx)
                        s.keys = { ctx.key }
                        if case.event then case.event(s, ctx, d) end
                    end
                    assert(ctx, "the case's shared set-up failed in an earlier cell")
                    local obs = act(case, s, d, ctx)
                    case.check(s, ctx, obs, d)
                    if d.errors then assert.same({}, d.errors()) end
                end)
            end
        end) end
    end
end)
end
