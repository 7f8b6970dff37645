-- A 2-key group lock's uncontended cycle: GROUP_ACQUIRE (KEY, KEY:g2, the
-- fence counter), then GROUP_RELEASE (the keys and their waiters queues);
-- the floor's "group" mode sends the same. Issue 36: within 1.1x of the
-- single lock's ratio.
return {
    id = "group",
    title = "2-key group acquire+release",
    floor = "group",
    iterations = 1000,
    round_trips = 2,
    commands = { evalsha = 2, get = 4, set = 2, xadd = 2, exists = 2, del = 2 },
    occasional = { xadd = 2 },
    target = { speed_min = { split = 0.86, shared = 0.82 } },
    setup = function(ctx)
        ctx.client = ctx.redlock.new { servers = ctx.urls }
        ctx.keys = { ctx.key, ctx.key .. ":g2" }
        return ctx
    end,
    op = function(s)
        local g = s.client:acquire(s.keys)
        assert(g:release())
    end,
    teardown = function(s) s.client:close() end,
}
