-- with_lock with an empty fn: the cycle plus pcall, result packing and the
-- release check. Same round trips as the plain cycle.
return {
    id = "with_lock",
    title = "with_lock, empty fn",
    floor = "cycle",
    iterations = 1000,
    round_trips = 2,
    -- inside the release script: the EXISTS of the waiters flag, which
    -- tells it that nobody waits, so it does no wake-up work (redlock.notify)
    commands = { evalsha = 2, get = 2, set = 1, incr = 1, del = 1, exists = 1 },
    -- the floor releases with the plain compare-and-delete
    floor_commands = { evalsha = 2, get = 2, set = 1, incr = 1, del = 1 },
    target = { speed_min = 0.95 },
    setup = function(ctx)
        ctx.client = ctx.redlock.new { servers = ctx.urls }
        ctx.fn = function() end
        return ctx
    end,
    op = function(s) assert(s.client:with_lock(s.key, s.fn)) end,
    teardown = function(s) s.client:close() end,
}
