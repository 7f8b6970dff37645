-- Uncontended acquire + release on one server: the cycle every user pays.
-- Round trips: EVALSHA acquire (GET, SET PX, and the fence: INCR and TIME,
-- and a SET of the counter at most once a millisecond), EVALSHA release
-- (GET, DEL); exactly what the floor's "cycle" mode sends.
return {
    id = "cycle",
    title = "acquire+release, uncontended",
    floor = "cycle",
    iterations = 1000,
    round_trips = 2,
    -- inside the release script: the EXISTS of the waiters set, which tells
    -- it that nobody waits, so it does no wake-up work (redlock.notify)
    commands = { evalsha = 2, get = 2, set = 1, incr = 1, time = 1, del = 1, exists = 1 },
    -- the floor releases with the plain compare-and-delete
    floor_commands = { evalsha = 2, get = 2, set = 1, incr = 1, time = 1, del = 1 },
    occasional = { set = 1 }, -- the fence counter raised to the clock
    -- issue 26: >= 0.95x the floor with the server on a core of its own,
    -- >= 0.90x with the server and the client on one core
    target = { speed_min = { split = 0.95, shared = 0.90 } },
    setup = function(ctx)
        ctx.client = ctx.redlock.new { servers = ctx.urls }
        return ctx
    end,
    op = function(s)
        local lock = s.client:acquire(s.key)
        assert(lock:release())
    end,
    teardown = function(s) s.client:close() end,
}
