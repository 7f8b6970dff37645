-- The uncontended cycle of 10-cycle.lua with an on_event hook that does
-- nothing: what building and passing the two events (acquired, released)
-- costs. 10-cycle.lua has no hook, and builds no event.
return {
    id = "cycle_hook",
    title = "acquire+release, on_event no-op",
    floor = "cycle",
    iterations = 1000,
    round_trips = 2,
    commands = { evalsha = 2, get = 2, set = 1, incr = 1, time = 1, del = 1, exists = 1 },
    floor_commands = { evalsha = 2, get = 2, set = 1, incr = 1, time = 1, del = 1 },
    occasional = { set = 1 },
    target = { speed_min = 0.9 },
    compare = { id = "cycle", max = 1.1 },
    setup = function(ctx)
        ctx.client = ctx.redlock.new { servers = ctx.urls, on_event = function() end }
        return ctx
    end,
    op = function(s)
        local lock = s.client:acquire(s.key)
        assert(lock:release())
    end,
    teardown = function(s) s.client:close() end,
}
