-- Uncontended acquire + release on one server: the cycle every user pays.
-- Round trips: SET NX PX and the fence's XADD in one write (no script:
-- redlock.scripted.grant; XADD raises the counter stream to the server's
-- clock on every grant), EVALSHA release (GET, EXISTS of the waiters queue, DEL); the
-- floor's "cycle" mode sends the same, with the plain compare-and-delete.
return {
    id = "cycle",
    title = "acquire+release, uncontended",
    floor = "cycle",
    iterations = 1000,
    round_trips = 2,
    -- inside the release script: the EXISTS of the waiters set, which tells
    -- it that nobody waits, so it does no wake-up work (redlock.notify)
    commands = { set = 1, xadd = 1, evalsha = 1, get = 1, del = 1, exists = 1 },
    -- the floor releases with the plain compare-and-delete
    floor_commands = { set = 1, xadd = 1, evalsha = 1, get = 1, del = 1 },
    -- sent by the client besides the script (time inside commands)
    sent = { "set", "xadd" },
    floor_sent = { "set", "xadd" },
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
