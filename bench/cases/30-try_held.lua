-- try_acquire on a key another client holds: one EVALSHA that answers the
-- holder's PTTL, so the caller learns "locked" in one round trip.
return {
    id = "try_held",
    title = "try_acquire on a held key",
    floor = "held",
    iterations = 1000,
    round_trips = 1,
    commands = { evalsha = 1, get = 1, pttl = 1 },
    target = { speed_min = { split = 0.95, shared = 0.90 } },
    setup = function(ctx)
        ctx.holder = ctx.redlock.new { servers = ctx.urls, ttl = 600000 }
        ctx.held = assert(ctx.holder:acquire(ctx.key))
        ctx.client = ctx.redlock.new { servers = ctx.urls }
        return ctx
    end,
    op = function(s)
        local lock, _, code = s.client:try_acquire(s.key)
        assert(lock == nil and code == "locked", code)
    end,
    teardown = function(s)
        assert(s.held:release())
        s.client:close()
        s.holder:close()
    end,
}
