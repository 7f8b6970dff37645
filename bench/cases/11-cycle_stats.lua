-- The uncontended cycle of 10-cycle.lua, reading client:stats() after
-- every 100 cycles, as a metrics export would (much more often than one).
-- The counters themselves are always on: 10-cycle.lua pays them too.
return {
    id = "cycle_stats",
    title = "acquire+release, stats() every 100",
    floor = "cycle",
    iterations = 1000,
    round_trips = 2,
    commands = { evalsha = 2, get = 2, set = 1, incr = 1, time = 1, del = 1, exists = 1 },
    floor_commands = { evalsha = 2, get = 2, set = 1, incr = 1, time = 1, del = 1 },
    occasional = { set = 1 },
    target = { speed_min = 0.95 },
    compare = { id = "cycle", max = 1.05 },
    setup = function(ctx)
        ctx.client = ctx.redlock.new { servers = ctx.urls }
        return ctx
    end,
    op = function(s, i)
        local lock = s.client:acquire(s.key)
        assert(lock:release())
        if i % 100 == 0 then assert(s.client:stats().acquired > 0) end
    end,
    teardown = function(s) s.client:close() end,
}
