--- Benchmark: how soon a client follows a Sentinel failover. A master, its
-- replica and three sentinels; a client takes and releases locks in a loop
-- (fresh keys) while `SENTINEL FAILOVER` moves the master back and forth.
-- Measured, per failover: from the first `+switch-master` that any sentinel
-- announces (this process is subscribed to all three and looks between two
-- cycles) to the client's first lock on the new master (its connection's
-- name says where it is), on core.now()'s clock. Also: how many locks the
-- client took on the old master after the announcement. The client
-- subscribes to one sentinel, the first of its list; the failovers are
-- asked alternately of that one (then the leader, it announces first) and
-- of another (the client's sentinel announces the switch once it learns of
-- it from the leader). Starts its own servers (spec/helper.lua) and stops
-- them at the end.
--   make bench-sentinel     (FAILOVERS=8: 4 of each)
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"

local format = string.format
local function env(name, default) return tonumber(os.getenv(name)) or default end
local FAILOVERS = env("FAILOVERS", 8)
local NAME = "benchmaster"

local master = helper.start_server()
local replica = helper.start_replica(master)
local sentinels = {}
for i = 1, 3 do sentinels[i] = helper.start_sentinel({ [NAME] = master }) end
assert(helper.eventually(20000, function()
    for _, s in ipairs(sentinels) do
        local out = s:cli("SENTINEL", "master", NAME)
        if not out:find("num%-other%-sentinels\n2") or not out:find("num%-slaves\n1") then return false end
    end
    return true
end), "the sentinels did not discover each other and the replica")

-- One subscription per sentinel, read between cycles: PING answers pong,
-- or first the message that came before it (RESP2 subscribe mode). Each
-- failover subscribes anew (earlier messages, unread, stay behind), and a
-- message counts when it names the master expected.
local function watcher(s)
    local w = { port = s.port }
    function w.open()
        if w.conn then w.conn:close() end
        w.conn = core.conn { host = "127.0.0.1", port = s.port }
        assert(w.conn:command("SUBSCRIBE", "+switch-master"))
    end
    function w.poll(port)
        local r = w.conn:command("PING")
        return type(r) == "table" and r[1] == "message"
            and tostring(r[3]):find("^" .. NAME .. " .* " .. port .. "$") ~= nil
    end
    return w
end
local watchers = {}
for i, s in ipairs(sentinels) do watchers[i] = watcher(s) end

local addrs = {}
for i, s in ipairs(sentinels) do addrs[i] = "127.0.0.1:" .. s.port end
local client = redlock.new { servers = { { sentinels = addrs, master_name = NAME } } }
local conn = client.servers[1].conn

local function port_of_master()
    return tonumber(sentinels[1]:master_addr(NAME):match(":(%d+)$"))
end

local follow, stale_locks = { {}, {} }, { {}, {} }
local n = 0
for f = 1, FAILOVERS do
    local old = port_of_master()
    local new_server = old == master.port and replica or master
    assert(helper.eventually(30000, function()
        return new_server:cli("INFO", "replication"):find("master_link_status:up", 1, true) ~= nil
    end), "the replica is not in sync")
    for _ = 1, 20 do assert(assert(client:acquire("bench:sentinel:warm")):release()) end
    for _, w in ipairs(watchers) do w.open() end
    assert(tonumber(conn:name():match(":(%d+)%)$")) == old, "the client is not on the master")
    -- the failover runs in the background: this loop keeps locking
    local kind = (f - 1) % 2 + 1 -- 1: the client's sentinel leads, 2: another
    helper.later(0, format("redis-cli -p %d SENTINEL FAILOVER %s >/dev/null", sentinels[kind].port, NAME))
    local switched_at, after = nil, 0
    local deadline = core.now() + 30000
    while core.now() < deadline do
        local iter = core.now()
        if not switched_at then
            for _, w in ipairs(watchers) do
                if w.poll(new_server.port) then
                    switched_at = core.now()
                    break
                end
            end
        end
        n = n + 1
        local lock = client:try_acquire("bench:sentinel:" .. n)
        local t = core.now()
        if lock then
            local at = tonumber(conn:name():match(":(%d+)%)$"))
            lock:release()
            if at == new_server.port then
                -- the client saw the announcement first (after this
                -- iteration's look): it came after iter
                if not switched_at then switched_at = iter end
                if switched_at then follow[kind][#follow[kind] + 1] = t - switched_at end
                break
            elseif switched_at then
                after = after + 1
            end
        end
    end
    assert(switched_at, "no +switch-master seen in failover " .. f)
    stale_locks[kind][#stale_locks[kind] + 1] = after
    print(format("  failover %d (%s): first lock on the new master %.1f ms after the first +switch-master "
        .. "(%d locks on the old master after it)", f, kind == 1 and "the client's sentinel leads"
        or "another leads", follow[kind][#follow[kind]] or -1, after))
    -- the old master rejoins as a replica before the next failover
    local old_server = new_server == master and replica or master
    assert(helper.eventually(30000, function()
        return old_server:cli("ROLE"):match("^slave") ~= nil
    end), "the old master did not become a replica")
end
client:close()
print("bench-sentinel: the first +switch-master to the client's first lock on the new master")
local report = dofile("bench/report.lua")
report.table("sentinel", "Following a Sentinel failover (`SENTINEL FAILOVER`, loopback): from the first"
    .. " `+switch-master` to the client's first lock on the new master", { "", "failovers", "median", "max",
    "locks on the old master after it (median)" })
for kind, what in ipairs { "the client's sentinel leads", "another sentinel leads" } do
    local t = follow[kind]
    table.sort(t)
    if #t > 0 then
        print(format("  %-28s median %.1f ms of %d failovers (min %.1f, max %.1f); locks on the old master "
            .. "after the announcement: median %d", what, helper.median(t), #t, t[1], t[#t],
            helper.median(stale_locks[kind])))
        report.row("sentinel", { what, #t, format("%.1f ms", helper.median(t)), format("%.1f ms", t[#t]),
            format("%d", helper.median(stale_locks[kind])) })
    end
end
helper.stop_all()
