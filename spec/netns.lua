--- Network partitions for the fault specs: redis-servers in network
-- namespaces of their own (`ip netns`), joined to this process's namespace
-- (the client's) and to each other by veth pairs, and links cut and healed
-- with `ip link set ... down/up`. A cut link drops packets silently, as a
-- partition does (no RST, no ICMP): unlike a frozen server (SIGSTOP), whose
-- kernel still completes TCP handshakes, a cut-off server is not even
-- connected to.
--
-- Addressing: each namespace has one address of its own on its loopback,
-- 10.<a>.<b>.<n>/32, which every neighbour routes to over the veth that
-- joins them (each veth is a /30 of 169.254.<c>.x; traffic a namespace
-- sends leaves with its own address as source), so a server has one
-- address that everybody reaches while their link is up. These are
-- private addresses inside namespaces that only this machine has: the
-- rule "test servers bind to 127.0.0.1 only" is about never exposing a
-- test server, and they are not exposed.
--
-- Needs root (CAP_NET_ADMIN); missing() says why not, for a skip. Every
-- namespace and veth is removed by net:destroy(), and otherwise by
-- spec/run.sh when the suite ends (each namespace's directory under the
-- suite's temporary directory has a `stop` file that kills what runs in the
-- namespace and deletes it, and deletes its veths).
local helper = require "helper"

local _M = {}

-- `ip` never runs under the sanitizer runtimes that make test-sanitize
-- preloads (LeakSanitizer fails it on its own leaks)
local NO_PRELOAD = "env -u LD_PRELOAD "

local function sh(cmd)
    local ok = os.execute(NO_PRELOAD .. "sh -c " .. helper.quote(cmd))
    return ok == true or ok == 0
end

local function rnd(n)
    local f = assert(io.open("/dev/urandom", "rb"))
    local a, b = f:read(2):byte(1, 2)
    f:close()
    return (a * 256 + b) % n
end

local function run(cmd)
    local out = helper.read_cmd(NO_PRELOAD .. "sh -c " .. helper.quote(cmd .. " 2>&1; echo \"rc=$?\""))
    local body, rc = out:match("^(.-)rc=(%d+)%s*$")
    if rc ~= "0" then error("netns: `" .. cmd .. "` failed: " .. (body or out), 2) end
    return body
end

local checked, why_not
--- Why namespaces cannot be made here (not root, no `ip`, no
-- CAP_NET_ADMIN), or nil. Tried once per process.
function _M.missing()
    if checked then return why_not end
    checked = true
    if not sh("command -v ip >/dev/null 2>&1") then
        why_not = "no `ip` command (Debian's iproute2)"
        return why_not
    end
    local probe = string.format("rlprobe%d", rnd(60000))
    if not sh("ip netns add " .. probe .. " >/dev/null 2>&1") then
        why_not = "network namespaces cannot be made here (needs root / CAP_NET_ADMIN)"
        return why_not
    end
    local veth = sh(string.format("ip link add %sa type veth peer name %sb >/dev/null 2>&1", probe, probe))
    if veth then sh("ip link del " .. probe .. "a >/dev/null 2>&1") end
    sh("ip netns del " .. probe .. " >/dev/null 2>&1")
    if not veth then why_not = "veth pairs cannot be made here" end
    return why_not
end

local Net = {}
Net.__index = Net

--- A new network: only the client's namespace ("client", this process's)
-- so far. Names are unique per net (a random tag), so that nets of
-- several runs never collide.
function _M.new()
    local tag = string.format("%04x", rnd(65536))
    local self = setmetatable({
        tag = tag,
        -- 10.a.b.n: the namespaces' addresses
        prefix = string.format("10.%d.%d.", 100 + rnd(150), rnd(256)),
        -- 169.254.c.4k+1/+2: the veths'
        link_prefix = string.format("169.254.%d.", 1 + rnd(254)),
        spaces = {},
        links = {},
        nlinks = 0,
    }, Net)
    return self
end

--- Adds a namespace `name`, joined to the client's by a veth (unless
-- opts.client == false). Returns { name =, ns =, addr =, exec = } where
-- exec is the prefix that runs a command inside it, for
-- helper.start_server's opts.exec.
function Net:space(name, opts)
    opts = opts or {}
    local n = #self.spaces + 1
    local ns = string.format("rl%s%s", self.tag, name)
    local space = { name = name, ns = ns, addr = self.prefix .. n, exec = "ip netns exec " .. ns .. " " }
    local dir = helper.fresh_dir("netns")
    space.dir = dir
    -- the clean-up first, so that a failure halfway through leaves nothing
    local stop = assert(io.open(dir .. "/stop", "w"))
    stop:write(string.format([[
unset LD_PRELOAD
for p in $(ip netns pids %s 2>/dev/null); do kill -CONT $p; kill -KILL $p; done 2>/dev/null
ip netns del %s 2>/dev/null
for l in $(cat %s/veths 2>/dev/null); do ip link del $l 2>/dev/null; done
true
]], ns, ns, dir))
    stop:close()
    self.spaces[#self.spaces + 1] = space
    self.spaces[name] = space
    run("ip netns add " .. ns)
    run(space.exec .. "ip link set lo up")
    run(space.exec .. "ip addr add " .. space.addr .. "/32 dev lo")
    if opts.client ~= false then self:link("client", name) end
    return space
end

local function note_veth(space, veth)
    if not space then return end
    local f = assert(io.open(space.dir .. "/veths", "a"))
    f:write(veth, "\n")
    f:close()
end

--- Joins namespaces a and b (names; "client" is this process's) by a
-- veth pair, each routing the other's address over it.
function Net:link(a, b)
    self.nlinks = self.nlinks + 1
    local k = self.nlinks
    assert(k < 64, "netns: too many links")
    local va, vb = string.format("rl%s%da", self.tag, k), string.format("rl%s%db", self.tag, k)
    local sa, sb = self.spaces[a], self.spaces[b]
    local ia, ib = self.link_prefix .. (4 * k + 1), self.link_prefix .. (4 * k + 2)
    -- noted before it exists: the stop file deletes what it can
    note_veth(sa or sb, va)
    run(string.format("ip link add %s type veth peer name %s", va, vb))
    local function side(space, veth, mine)
        local exec = space and space.exec or ""
        if space then run(string.format("%sip link set %s netns %s", "", veth, space.ns)) end
        run(string.format("%sip addr add %s/30 dev %s", exec, mine, veth))
        run(string.format("%sip link set %s up", exec, veth))
    end
    local function mac(space, veth)
        return run(string.format("%scat /sys/class/net/%s/address", space and space.exec or "", veth))
            :match("%S+")
    end
    -- the peer's own address over this veth, leaving with ours; the
    -- peer's MAC written in (no ARP: a partitioned link then keeps
    -- dropping silently, where a failed ARP would report "no route")
    local function route(space, veth, peer_ip, peer_mac, peer_space)
        local exec = space and space.exec or ""
        run(string.format("%sip neigh replace %s lladdr %s dev %s nud permanent", exec, peer_ip, peer_mac, veth))
        if peer_space then
            run(string.format("%sip route replace %s/32 via %s dev %s%s", exec, peer_space.addr, peer_ip, veth,
                space and (" src " .. space.addr) or ""))
        end
    end
    side(sa, va, ia)
    side(sb, vb, ib)
    local ma, mb = mac(sa, va), mac(sb, vb)
    route(sa, va, ib, mb, sb)
    route(sb, vb, ia, ma, sa)
    self.links[a .. "|" .. b] = { a = a, b = b, va = va, vb = vb, ia = ia, ib = ib, ma = ma, mb = mb }
    return self
end

local function find(self, a, b)
    local l = self.links[a .. "|" .. b] or self.links[b .. "|" .. a]
    assert(l, "netns: no link between " .. a .. " and " .. b)
    return l
end

--- Cuts the link between a and b: b's end goes down. a then sees
-- silence, as in a real partition: its packets go out and vanish (no RST,
-- no ICMP unreachable; no ARP either, see link()). b's end, being down, has no route to a
-- any more: b's own sends fail at once (so cut with the side whose view
-- matters first: the client, the sentinels).
function Net:cut(a, b) run(self:cut_cmd(a, b)) end

--- The shell command of cut(a, b), to run later from the background
-- (helper.later) while this process is blocked in a call.
function Net:cut_cmd(a, b)
    local l = find(self, a, b)
    local space = self.spaces[b]
    local veth = l.a == b and l.va or l.vb
    return string.format("%s%sip link set %s down", NO_PRELOAD, space and space.exec or "", veth)
end

--- Heals it: b's end up again, with the neighbour and route that went
-- down with it.
function Net:heal(a, b)
    local l = find(self, a, b)
    local space, peer = self.spaces[b], self.spaces[a]
    local exec = space and space.exec or ""
    local veth, peer_ip, peer_mac = l.vb, l.ia, l.ma
    if l.a == b then veth, peer_ip, peer_mac = l.va, l.ib, l.mb end
    run(string.format("%sip link set %s up", exec, veth))
    run(string.format("%sip neigh replace %s lladdr %s dev %s nud permanent", exec, peer_ip, peer_mac, veth))
    if peer then
        run(string.format("%sip route replace %s/32 via %s dev %s%s", exec, peer.addr, peer_ip, veth,
            space and (" src " .. space.addr) or ""))
    end
end

--- config lines (a copy) with "protected-mode no": without a password,
-- Redis 3.2 and later refuse clients from any address but the loopback,
-- and these servers are reached over the veths (they are only ever seen
-- inside this machine's namespaces).
function _M.open_config(config)
    local out = { "protected-mode no" }
    for _, l in ipairs(config or {}) do out[#out + 1] = l end
    return out
end

--- Starts a redis-server inside namespace `name`, bound to its address
-- (helper.start_server's opts, with host and exec set).
function Net:server(name, opts)
    local space = assert(self.spaces[name], "netns: no namespace " .. name)
    local o = { host = space.addr, exec = space.exec }
    for k, v in pairs(opts or {}) do o[k] = v end
    o.config = _M.open_config(o.config)
    return helper.start_server(o)
end

--- Starts a worker (helper.spawn) inside namespace `name`.
function Net:spawn(name, script, ...)
    -- (what the worker preloads, e.g. the sanitizer runtimes, given back)
    return helper.spawn_in(NO_PRELOAD .. assert(self.spaces[name], "netns: no namespace " .. name).exec
        .. "env LD_PRELOAD=\"$LD_PRELOAD\" ", script, ...)
end

--- Removes every namespace and veth of this net (and stops what runs in
-- them). Idempotent.
function Net:destroy()
    for _, space in ipairs(self.spaces) do
        sh("sh " .. helper.quote(space.dir .. "/stop") .. " >/dev/null 2>&1")
    end
end

return _M
