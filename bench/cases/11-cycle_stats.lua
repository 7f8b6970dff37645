-- The uncontended cycle of 10-cycle.lua, reading client:stats() after
-- every 100 cycles, as a metrics export would (much more often than one).
-- The counters themselves are always on: 10-cycle.lua pays them too.
local case = dofile("bench/cases/10-cycle.lua")
case.id = "cycle_stats"
case.title = "acquire+release, stats() every 100"
case.compare = { id = "cycle", max = 1.05 }
case.op = function(s, i)
    local lock = s.client:acquire(s.key)
    assert(lock:release())
    if i % 100 == 0 then assert(s.client:stats().acquired > 0) end
end
return case
