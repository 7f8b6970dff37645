-- A semaphore's uncontended cycle (limit 3): acquire + release of a permit.
-- Round trips: EVALSHA of SEM_ACQUIRE (the key, its waiters queue and
-- data, the caller's hand-off list, the fence counter), EVALSHA of
-- SEM_RELEASE; the floor's "permit" mode sends the same (bench/floor.c).
-- Issue 36: within 1.1x of the single lock's ratio to its floor (the
-- cycle's 0.95 split, 0.90 shared).
return {
    id = "permit",
    title = "permit acquire+release (limit 3)",
    floor = "permit",
    iterations = 1000,
    round_trips = 2,
    commands = { evalsha = 2, type = 2, time = 2, zremrangebyscore = 1, zscore = 3, zcard = 4, zrange = 3,
        zadd = 2, pexpire = 1, zrem = 2, hdel = 1, del = 2, xadd = 1, exists = 1 },
    -- (the fence: XADD on the counter stream; a second one now and then,
    -- when a millisecond's sequence runs out)
    occasional = { xadd = 1 },
    target = { speed_min = { split = 0.86, shared = 0.82 } },
    setup = function(ctx)
        -- (set on the client, as the cycle case passes no options per call:
        -- neither measures the per-call option check)
        ctx.client = ctx.redlock.new { servers = ctx.urls, limit = 3 }
        return ctx
    end,
    op = function(s)
        local permit = s.client:acquire(s.key)
        assert(permit:release())
    end,
    teardown = function(s) s.client:close() end,
}
