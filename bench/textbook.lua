-- The uncontended cycle with some options, against the textbook floor
-- (bench/floor.c's "textbook" mode: SET key token NX PX ttl, then EVALSHA
-- of the compare-and-delete script of the Redis documentation): what the
-- lock costs the server next to what a user writes without a library.
-- bench/cases/13-16 make one case each from it.
-- usage: return dofile("bench/textbook.lua") { id =, title =, opts =, commands =, sent =, occasional = }
return function(c)
    return {
        id = c.id,
        title = c.title,
        headline = c.headline,
        floor = "textbook",
        iterations = 1000,
        round_trips = 2,
        commands = c.commands,
        occasional = c.occasional,
        -- sent by the client besides scripts (time inside commands)
        sent = c.sent,
        floor_commands = { set = 1, evalsha = 1, get = 1, del = 1 },
        floor_sent = { "set" },
        -- issue 35: cycles/s >= 0.95x the textbook loop split, >= 0.90x
        -- shared; time inside commands <= 1.5x the textbook's
        target = { speed_min = { split = 0.95, shared = 0.90 }, inside_max = 1.5 },
        setup = function(ctx)
            local o = { servers = ctx.urls }
            for k, v in pairs(c.opts or {}) do o[k] = v end
            ctx.client = ctx.redlock.new(o)
            return ctx
        end,
        op = function(s)
            local lock = s.client:acquire(s.key)
            assert(lock:release())
        end,
        teardown = function(s) s.client:close() end,
    }
end
