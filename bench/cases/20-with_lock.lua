-- with_lock with an empty fn: the cycle plus pcall, passing the results on, the
-- release check and the renewal's registration. The plain cycle's round
-- trips and commands. Target (issue 26): within 0.95x of the plain cycle,
-- i.e. the cycle's time / with_lock's time >= 0.95 in the same round.
local cycle = dofile("bench/cases/10-cycle.lua")
return {
    id = "with_lock",
    title = "with_lock, empty fn",
    floor = "cycle",
    iterations = 1000,
    round_trips = cycle.round_trips,
    commands = cycle.commands,
    floor_commands = cycle.floor_commands,
    sent = cycle.sent,
    floor_sent = cycle.floor_sent,
    target = cycle.target,
    compare = { id = "cycle", speed_min = 0.95 },
    setup = function(ctx)
        ctx.client = ctx.redlock.new { servers = ctx.urls }
        ctx.fn = function() end
        return ctx
    end,
    op = function(s) assert(s.client:with_lock(s.key, s.fn)) end,
    teardown = function(s) s.client:close() end,
}
