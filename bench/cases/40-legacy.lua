-- Legacy mode's cycle (mode = "legacy", here on a normal server): servers
-- without scripting get WATCH, GET, MULTI, SETNX, PEXPIRE, XADD fence, EXEC
-- to take the lock and WATCH, GET, MULTI, DEL, EXEC to release it, each a
-- round trip (Redis 5.0+: the fence counter a stream, raised to the
-- server's clock by XADD itself). The floor sends the same twelve commands
-- from C.
return {
    id = "legacy",
    title = "legacy mode: acquire+release",
    floor = "legacy",
    iterations = 300,
    round_trips = 12,
    commands = {
        watch = 2, get = 2, multi = 2, setnx = 1, pexpire = 1, xadd = 1, exec = 2, del = 1,
    },
    setup = function(ctx)
        ctx.client = ctx.redlock.new { servers = ctx.urls, mode = "legacy" }
        return ctx
    end,
    op = function(s)
        local lock = s.client:acquire(s.key)
        assert(lock:release())
    end,
    teardown = function(s) s.client:close() end,
}
