-- The uncontended cycle of 10-cycle.lua with an on_event hook that does
-- nothing: what building and passing the two events (acquired, released)
-- costs. 10-cycle.lua has no hook, and builds no event.
local case = dofile("bench/cases/10-cycle.lua")
case.id = "cycle_hook"
case.title = "acquire+release, on_event no-op"
case.target = { speed_min = 0.9 }
case.compare = { id = "cycle", max = 1.1 }
case.setup = function(ctx)
    ctx.client = ctx.redlock.new { servers = ctx.urls, on_event = function() end }
    return ctx
end
return case
