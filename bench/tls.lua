--- Benchmark: the uncontended acquire+release cycle over TLS, as a ratio to
-- the same cycle without TLS on the same redis-server (its plain port),
-- measured in the same run in interleaved rounds; and the same for Redlock
-- over 3 servers. Connections are made once (warm-up): this is the cost of
-- the encryption on each round trip, not of the handshake.
-- Starts its own redis-servers with certificates made by openssl
-- (spec/helper.lua) and stops them at the end.
--   make bench-tls     (CYCLES=500 ROUNDS=9)
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"

local now, format = core.now, string.format
local function env(name, default) return tonumber(os.getenv(name)) or default end
local CYCLES, ROUNDS = env("CYCLES", 500), env("ROUNDS", 9)

local function cycle_us(client, key, n)
    local t0 = now()
    for _ = 1, n do
        local lock = assert(client:acquire(key))
        assert(lock:release())
    end
    return (now() - t0) * 1000 / n
end

local median = helper.median

local certs = helper.tls_certs()
local servers = { helper.start_tls_server(certs), helper.start_tls_server(certs),
                  helper.start_tls_server(certs) }
local tls = { ca_file = certs.ca }
local plain_urls, tls_urls = {}, {}
for i, s in ipairs(servers) do
    plain_urls[i], tls_urls[i] = s:url(), s:tls_url()
end
local clients = {
    { "single, plain", redlock.new { servers = { plain_urls[1] } } },
    { "single, TLS", redlock.new { servers = { tls_urls[1] }, tls = tls } },
    { "Redlock x3, plain", redlock.new { servers = plain_urls, server_timeout = 1000 } },
    { "Redlock x3, TLS", redlock.new { servers = tls_urls, tls = tls, server_timeout = 1000 } },
}
local results = {}
for i, c in ipairs(clients) do
    cycle_us(c[2], "bench:tls:" .. i, 20) -- connections, handshakes, script caches
    results[i] = {}
end
for _ = 1, ROUNDS do
    for i, c in ipairs(clients) do
        results[i][#results[i] + 1] = cycle_us(c[2], "bench:tls:" .. i, CYCLES)
    end
end
print(format("TLS vs plain, uncontended acquire+release (median of %d rounds of %d cycles)",
    ROUNDS, CYCLES))
local med = {}
for i, c in ipairs(clients) do
    med[i] = median(results[i])
    print(format("  %-18s %8.1f us/cycle", c[1], med[i]))
    c[2]:close()
end
print(format("  ratio TLS/plain: single %.2fx, Redlock x3 %.2fx", med[2] / med[1], med[4] / med[3]))
helper.stop_all()
