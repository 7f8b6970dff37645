--- Benchmark: the uncontended acquire+release cycle over TLS, as ratios of
-- medians measured in one run, in interleaved rounds, against the same
-- redis-servers: redlock over TLS vs redlock without TLS (their plain
-- port), and vs the C floor over TLS (bench/tls_floor.c over OpenSSL: SET
-- NX PX, then the compare-and-delete script; and the library's own acquire
-- and release scripts, bench/floor.c's fair floor); the same for Redlock
-- over 3 servers. Each side runs in a process of its own
-- (bench/tls_case.lua, the floor's binary), its cycles on connections made
-- once (warm-up): the cost of the encryption on each round trip. Then the first call of a new client
-- (connect and handshakes included), single and Redlock x3, on loopback and
-- behind bench/delay_proxy.c (RTT_US, default 2000: a network, where
-- handshakes made one after the other would cost a round trip each).
-- Starts its own redis-servers with certificates made by openssl
-- (spec/helper.lua) and stops them at the end.
--   make bench-tls     (CYCLES=1000 ROUNDS=9 FIRST=10 RTT_US=2000)
local helper = require "helper"
local report = dofile("bench/report.lua")
local redlock = require "redlock"
local core = require "redlock.core"

local now, format = core.now, string.format
local function env(name, default) return tonumber(os.getenv(name)) or default end
local CYCLES, ROUNDS, FIRST = env("CYCLES", 1000), env("ROUNDS", 9), env("FIRST", 10)
local FLOOR = os.getenv("REDLOCK_TLS_FLOOR")
    or ((os.getenv("REDLOCK_BUILD") or "build") .. "/bench/tls_floor")
local RTT_US = env("RTT_US", 2000)
local BIN = (os.getenv("REDLOCK_BUILD") or "build") .. "/bench"

local median = helper.median

local certs = helper.tls_certs()
local servers = { helper.start_tls_server(certs), helper.start_tls_server(certs),
                  helper.start_tls_server(certs) }
local tls = { ca_file = certs.ca }
local plain_urls, tls_urls, plain_hp, tls_hp = {}, {}, {}, {}
for i, s in ipairs(servers) do
    plain_urls[i], tls_urls[i] = s:url(), s:tls_url()
    plain_hp[i], tls_hp[i] = "127.0.0.1:" .. s.port, "127.0.0.1:" .. s.tls_port
end

-- the C floor in a process of its own: its own loop's time per cycle
local function us_per_op(cmd)
    local out = helper.read_cmd(cmd .. " 2>&1")
    return assert(tonumber(out:match("ns_per_op=([%d.]+)")), cmd .. ": " .. out) / 1000
end
local WARMUP = 100
local function floor_case(hostports, over_tls, mode)
    return function(key)
        return us_per_op(format("%s -n %d -w %d -k %s %s %s %s", FLOOR, CYCLES, WARMUP, key,
            over_tls and ("-c " .. helper.quote(certs.ca)) or "-P", mode, table.concat(hostports, " ")))
    end
end
local function redlock_case(urls, over_tls)
    return function(key)
        local unpack = table.unpack or unpack
        return us_per_op(helper.lua_cmd("bench/tls_case.lua", CYCLES, WARMUP, key,
            over_tls and certs.ca or "-", unpack(urls)))
    end
end

-- five per topology, in this order (the ratios below count on it)
local cases = {
    { "single, redlock plain", redlock_case({ plain_urls[1] }, false) },
    { "single, redlock TLS", redlock_case({ tls_urls[1] }, true) },
    { "single, C SET NX plain", floor_case({ plain_hp[1] }, false, "setnx") },
    { "single, C SET NX TLS", floor_case({ tls_hp[1] }, true, "setnx") },
    { "single, C scripts TLS", floor_case({ tls_hp[1] }, true, "cycle") },
    { "Redlock x3, redlock plain", redlock_case(plain_urls, false) },
    { "Redlock x3, redlock TLS", redlock_case(tls_urls, true) },
    { "Redlock x3, C SET NX plain", floor_case(plain_hp, false, "setnx") },
    { "Redlock x3, C SET NX TLS", floor_case(tls_hp, true, "setnx") },
    { "Redlock x3, C scripts TLS", floor_case(tls_hp, true, "cycle") },
}

-- A delay proxy in front of each port (one process each, as each server
-- has its own network path); returns its ports.
local function start_proxies(ports, one_way_us)
    local out = {}
    for i, port in ipairs(ports) do
        local dir = helper.fresh_dir("proxy")
        os.execute(format("sh -c '%s/delay_proxy %d 900 %d >%s/out 2>&1 & echo $! >%s/pid'",
            BIN, one_way_us, port, dir, dir))
        for _ = 1, 250 do
            out[i] = tonumber(helper.read_cmd("cat " .. dir .. "/out 2>/dev/null"):match("^ports (%d+)"))
            if out[i] then break end
            helper.sleep(20)
        end
        assert(out[i], "the delay proxy did not start: " .. helper.read_cmd("cat " .. dir .. "/out"))
    end
    return out
end
local delayed = {}
for i, p in ipairs(start_proxies({ servers[1].tls_port, servers[2].tls_port, servers[3].tls_port },
    math.floor(RTT_US / 2))) do
    delayed[i] = format("rediss://127.0.0.1:%d", p)
end

-- a new client's first acquire+release: connections and handshakes included
local function first_ms(urls)
    local c = redlock.new { servers = urls, tls = tls, server_timeout = 1000 }
    local t0 = now()
    local lock = assert(c:acquire("bench:tls:first"))
    assert(lock:release())
    local ms = now() - t0
    c:close()
    return ms
end
local firsts = { { "single, TLS", { tls_urls[1] } }, { "Redlock x3, TLS", tls_urls },
    { format("single, TLS, RTT %d us", RTT_US), { delayed[1] } },
    { format("Redlock x3, TLS, RTT %d us", RTT_US), delayed } }

local results = {}
for i = 1, #cases do results[i] = {} end
for i = 1, #firsts do firsts[i][3] = {} end
for _ = 1, ROUNDS do
    for i, c in ipairs(cases) do
        results[i][#results[i] + 1] = c[2]("bench:tls:" .. i)
    end
    for _, f in ipairs(firsts) do
        for _ = 1, FIRST do f[3][#f[3] + 1] = first_ms(f[2]) end
    end
end
print(format("TLS, uncontended acquire+release (median of %d rounds of %d cycles; C floors: SET NX PX + "
    .. "compare-and-delete, and the acquire and release scripts)", ROUNDS, CYCLES))
local med = {}
for i, c in ipairs(cases) do
    med[i] = median(results[i])
    print(format("  %-26s %8.1f us/cycle", c[1], med[i]))
end
report.table("costs", "What else costs what: the uncontended acquire+release cycle (us) or a held lock's"
    .. " memory, against the same without the feature", { "", "with", "without", "ratio" })
for _, p in ipairs { { "single", 0 }, { "Redlock x3", 5 } } do
    local o = p[2]
    report.row("costs", { p[1] .. " over TLS (without: plain TCP)", format("%.1f us", med[o + 2]),
        format("%.1f us", med[o + 1]), format("%.2fx", med[o + 2] / med[o + 1]) })
    report.row("costs", { p[1] .. " over TLS (without: the C floor over TLS, SET NX)",
        format("%.1f us", med[o + 2]),
        format("%.1f us", med[o + 4]), format("%.2fx", med[o + 2] / med[o + 4]) })
    print(format("  %s: redlock TLS / redlock plain %.2fx; redlock TLS / C floor TLS %.2fx (SET NX), "
        .. "%.2fx (scripts); C SET NX TLS / plain %.2fx", p[1], med[o + 2] / med[o + 1],
        med[o + 2] / med[o + 4], med[o + 2] / med[o + 5], med[o + 4] / med[o + 3]))
end
print(format("First call of a new client, connect and TLS handshakes included (median of %d)",
    ROUNDS * FIRST))
for _, f in ipairs(firsts) do print(format("  %-26s %8.2f ms", f[1], median(f[3]))) end
helper.stop_all()
