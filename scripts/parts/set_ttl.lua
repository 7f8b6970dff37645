-- The key's PEXPIRE set to its latest permit's expiry, or the key deleted
-- when no permit is left (only the limit member).
-- Needs `key` (the lock key, KEYS[1]) and `now` (parts/now.lua).
if redis.call('ZCARD', key) <= 1 then redis.call('DEL', key)
else
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', key, math.max(1, tonumber(top[2]) - now))
end
