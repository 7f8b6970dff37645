-- Legacy mode's cycle (mode = "legacy", here on a normal server): servers
-- without scripting get WATCH, GET, MULTI, SETNX, PEXPIRE, INCR fence, TIME,
-- EXEC to take the lock and WATCH, GET, MULTI, DEL, EXEC to release it, each
-- a round trip. The floor sends the same thirteen commands from C. At most
-- once a millisecond an INCRBY raises the fence counter to the server's clock.
return {
    id = "legacy",
    title = "legacy mode: acquire+release",
    floor = "legacy",
    iterations = 300,
    round_trips = 13,
    commands = {
        watch = 2, get = 2, multi = 2, setnx = 1, pexpire = 1, incr = 1, time = 1, exec = 2, del = 1,
    },
    occasional = { incrby = 1 },
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
