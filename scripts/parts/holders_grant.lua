-- The grant of a holder set (a semaphore's permits, a shared lock's
-- readers): a fence, the set made with its marker member (`marker`
-- with score `marker_score`: what kind of set it is) if new, the holder's expiry as its
-- score, the set's ttl its latest holder's, and the holder out of the
-- queue (KEYS[2] waiters, KEYS[3] their data, KEYS[4] its hand-off
-- list). Defines the script's grant(); needs key, ttl, now, counter,
-- marker, marker_score and fence().
local function grant()
  local f = fence(counter)
  if redis.call('EXISTS', key) == 0 then redis.call('ZADD', key, marker_score, marker) end
  redis.call('ZADD', key, string.format('%.0f', now + ttl), ARGV[1])
--@include parts/set_ttl.lua
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('DEL', KEYS[4])
  return {1, f}
end
