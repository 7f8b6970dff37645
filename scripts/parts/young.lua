-- young(since, at, ms): whether a waiter whose place's score is `since`
-- came less than `ms` before `at` (both microseconds: the server's
-- clock, or for a Redlock waiter the score its client sends, see
-- acquire.lua). A place later than `at` counts as old, not young: the
-- server's clock stepped back since the waiter came (an NTP step), and its
-- wait has no measure; an old waiter is handed the lock and passed by no
-- newcomer, so a clock stepped back never makes a waiter wait longer.
-- clock_us(t): TIME's answer `t` in microseconds.
-- (not every script that includes this needs both)
-- luacheck: push ignore 211/young 211/clock_us
local function young(since, at, ms)
  local d = at - since
  return d >= 0 and d < ms * 1000
end
local function clock_us(t) return tonumber(t[1]) * 1000000 + tonumber(t[2]) end
-- luacheck: pop
