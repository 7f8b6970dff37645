-- Runs the examples against a throwaway redis-server, so they never rot: each
-- must exit 0 (each checks its own outcome) and say what it showed.
local helper = require "helper"

local EXAMPLES = {
    { "examples/quickstart.lua", { "no update lost" } },
    { "examples/flash_sale.lua", { "stock left 0, orders 12", "never oversold" } },
    { "examples/once_per_window.lua", { "rebuilds: 1 after window 1, 1 in the same window, 2 after window 2",
        "waited for the rebuild", "found it fresh" } },
    { "examples/fencing.lua", { "stale fence %d+: this store has seen %d+", "not owner:",
        "store holds \"written by B\"", "late write was rejected" } },
    { "examples/metrics.lua", { 'redlock_events_total{app="example",type="acquired"} 4',
        'redlock_wait_ms_count{app="example"} 10', "lock lost: key='example:metrics' reason=gone",
        "1 lost lock logged" } },
    { "examples/test_pool.lua", { "jobs done 6, most running at once [123]\n", "never more than 3 at once" } },
    { "examples/cache_readers.lua", { "torn 0", "no reader saw a half%-written cache" } },
    { "examples/move_stock.lua", { "moves 100, total stock 400", "no move lost" } },
}

describe("examples", function()
    local server
    setup(function() server = helper.start_server() end)
    teardown(function() helper.stop_all() end)

    for _, example in ipairs(EXAMPLES) do
        local file, expected = example[1], example[2]
        it(file .. " runs and checks itself", function()
            local status, out = helper.spawn(file, server:url()):wait(120000)
            assert.equal(0, status, out)
            for _, pattern in ipairs(expected) do assert.matches(pattern, out) end
        end)
    end

    it("flash_sale.lua with more buyers than items never oversells", function()
        local status, out = helper.spawn("examples/flash_sale.lua", server:url(), 12, 5):wait(120000)
        assert.equal(0, status, out)
        assert.matches("stock left 0, orders 5, buyers report 5 bought", out)
    end)

    it("the examples clean up after themselves (the server's fence counter aside)",
        function()
        local left = {}
        for k in server:cli("KEYS", "*"):gmatch("[^\n]+") do
            -- a release leaves a wake-up list that expires within 1 s
            local pttl = tonumber(server:cli("PTTL", k))
            local passing = pttl and pttl > 0 and pttl <= 1000
            if k ~= "redlock:fences" and not passing then left[#left + 1] = k end
        end
        assert.same({}, left)
        end)
end)
