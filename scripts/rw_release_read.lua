-- A reader leaves. KEYS[1] key, KEYS[2] waiters queue, KEYS[3] their data,
-- KEYS[4] the wake-up list, KEYS[5] fence counter; ARGV[1] token, ARGV[2]
-- the hand-off lists' prefix. Answers 0 (not ours: no unexpired reader of
-- that token), 1 (left), 3 (left last, and the key went to the waiters:
-- parts/serve_queue.lua, so a waiting writer gets it in this step).
-- While other readers hold, the key's PEXPIRE follows the latest.
--@include parts/fence.lua
if not seeded then return 0 end
local key = KEYS[1]
if redis.call('TYPE', key).ok ~= 'zset' or not redis.call('ZSCORE', key, 'shared') then return 0 end
do
--@include parts/now.lua
  redis.call('ZREMRANGEBYSCORE', key, 0, now)
  local s = redis.call('ZSCORE', key, ARGV[1])
  if not s or tonumber(s) <= 0 then
--@include parts/set_ttl.lua
    return 0
  end
  redis.call('ZREM', key, ARGV[1])
  if redis.call('ZCARD', key) > 1 then
--@include parts/set_ttl.lua
    return 1
  end
end
--@include parts/serve_queue.lua
