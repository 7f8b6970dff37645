-- A read lock's uncontended cycle (shared = true): RW_READ, then
-- RW_RELEASE_READ, with the semaphore's keys; the floor's "reader" mode
-- sends the same. Issue 36: within 1.1x of the single lock's ratio.
return {
    id = "reader",
    title = "read lock acquire+release",
    floor = "reader",
    iterations = 1000,
    round_trips = 2,
    commands = { evalsha = 2, type = 2, time = 3, zremrangebyscore = 1, zscore = 2, zcard = 2, zrange = 3,
        zadd = 2, pexpire = 1, zrem = 2, hdel = 1, del = 2, xadd = 1, exists = 1 },
    occasional = { xadd = 1 },
    target = { speed_min = { split = 0.86, shared = 0.82 } },
    setup = function(ctx)
        -- (set on the client, as the cycle case passes no options per call:
        -- neither measures the per-call option check)
        ctx.client = ctx.redlock.new { servers = ctx.urls, shared = true }
        return ctx
    end,
    op = function(s)
        local r = s.client:acquire(s.key)
        assert(r:release())
    end,
    teardown = function(s) s.client:close() end,
}
