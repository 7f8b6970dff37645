-- with_lock with an empty fn: the cycle plus pcall, passing the results on, the
-- release check and the renewal's registration. The plain cycle's round
-- trips and commands.
local cycle = dofile("bench/cases/10-cycle.lua")
return {
    id = "with_lock",
    title = "with_lock, empty fn",
    floor = "cycle",
    iterations = 1000,
    round_trips = cycle.round_trips,
    commands = cycle.commands,
    floor_commands = cycle.floor_commands,
    occasional = cycle.occasional,
    target = cycle.target,
    setup = function(ctx)
        ctx.client = ctx.redlock.new { servers = ctx.urls }
        ctx.fn = function() end
        return ctx
    end,
    op = function(s) assert(s.client:with_lock(s.key, s.fn)) end,
    teardown = function(s) s.client:close() end,
}
