--- One side of bench/tls.lua in a process of its own, as the C floor runs
-- in its: warm-up, then the timed acquire+release cycles on connections
-- made once. Prints "ns_per_op=<float>".
-- usage: lua bench/tls_case.lua CYCLES WARMUP KEY CA_FILE|- URL...
local redlock = require "redlock"
local core = require "redlock.core"

local cycles, warmup, key, ca = tonumber(arg[1]), tonumber(arg[2]), arg[3], arg[4]
local urls = {}
for i = 5, #arg do urls[#urls + 1] = arg[i] end
assert(cycles and warmup and key and ca and #urls > 0,
    "usage: tls_case.lua CYCLES WARMUP KEY CA_FILE|- URL...")

local client = redlock.new { servers = urls, tls = ca ~= "-" and { ca_file = ca } or nil,
                             server_timeout = 1000 }
for _ = 1, warmup do assert(assert(client:acquire(key)):release()) end
local t0 = core.now()
for _ = 1, cycles do
    local lock = assert(client:acquire(key))
    assert(lock:release())
end
print(string.format("ns_per_op=%.1f", (core.now() - t0) * 1e6 / cycles))
client:close()
