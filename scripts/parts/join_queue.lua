-- A refused waiter joins the waiters queue (KEYS[2]) with its data
-- (KEYS[3]) and empties its hand-off list (KEYS[4]), as acquire.lua
-- describes (every kind's waiter joins here: one queue per key); `now`,
-- `t` (TIME), `pttl` (the holder's), `counter` set; ARGV[1] token,
-- ARGV[2] ttl, `wait_ms` the waiter's ARGV of the next block, `how` its
-- "h", "p" or "w", `mark` what its data ends with ("" a single lock's or
-- a writer's, " r": a reader, see rw_read.lua; " s<limit>": a semaphore's).
-- Answers {0, pttl, now}.
redis.call('DEL', KEYS[4])
local span = tonumber(wait_ms)
if pttl >= 0 and pttl + 1 < span then span = pttl + 1 end
--@include parts/wait_slack.lua
span = span + SLACK_MS
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  redis.call('ZADD', KEYS[2], t[1] .. string.format('%06d', tonumber(t[2])), ARGV[1])
end
redis.call('HSET', KEYS[3], ARGV[1], string.format('%.0f %s %d', now + span,
  how ~= 'w' and ARGV[2] or '0',
  (counter and 1 or 0) + (how == 'p' and 2 or 0)) .. mark)
for k = 2, 3 do
  if redis.call('PTTL', KEYS[k]) < span then redis.call('PEXPIRE', KEYS[k], span) end
end
return {0, pttl, now}
