-- A refused waiter joins the waiters queue (KEYS[2]) with its data
-- (KEYS[3]) and empties its hand-off list (KEYS[4]), as acquire.lua
-- describes (every kind's waiter joins here: one queue per key); `now`,
-- `t` (TIME), `pttl` (the holder's), `counter` set; ARGV[1] token,
-- ARGV[2] ttl, `wait_ms` the waiter's ARGV of the next block, `how` its
-- "h", "p", "w" or "o" (woken only, as "w", but on its own hand-off list:
-- a Redlock waiter; its data's fenced says 4 more, which a release from
-- before "o", waking every ttl-0 waiter by the wake-up list, ignores),
-- `mark` what its data ends with ("" a single lock's or
-- a writer's, " r": a reader, see rw_read.lua; " s<limit>": a semaphore's),
-- `score` the place a Redlock waiter's client sends (acquire.lua's ARGV[7]),
-- else nil. Needs clock_us (parts/young.lua).
-- Its place: that score; else, the first time, the server's clock in
-- microseconds, but never before the last waiter's place (a clock
-- stepped back must not put a newcomer before those who came earlier: one
-- microsecond after it then); a later attempt keeps its place.
-- Answers {0, pttl, now, its place}.
redis.call('DEL', KEYS[4])
local span = tonumber(wait_ms)
if pttl >= 0 and pttl + 1 < span then span = pttl + 1 end
--@include parts/wait_slack.lua
span = span + SLACK_MS
if score then
  redis.call('ZADD', KEYS[2], score, ARGV[1])
elseif not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  local at = clock_us(t)
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
  if last and tonumber(last) >= at then at = tonumber(last) + 1 end
  redis.call('ZADD', KEYS[2], string.format('%.0f', at), ARGV[1])
end
redis.call('HSET', KEYS[3], ARGV[1], string.format('%.0f %s %d', now + span,
  (how == 'h' or how == 'p') and ARGV[2] or '0',
  (counter and 1 or 0) + (how == 'p' and 2 or 0) + (how == 'o' and 4 or 0)) .. mark)
for k = 2, 3 do
  if redis.call('PTTL', KEYS[k]) < span then redis.call('PEXPIRE', KEYS[k], span) end
end
return {0, pttl, now, tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]))}
