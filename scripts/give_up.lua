-- KEYS[1] lock key, KEYS[2] the waiters queue, KEYS[3] the waiters' data,
-- KEYS[4] the caller's hand-off list, optionally KEYS[5] the wake-up list;
-- ARGV[1] token. A waiter that gives up leaves the queue; if the lock was
-- handed to it meanwhile, the answer is its hand-off's element ("fence
-- server-ms", as BLPOP would have returned it), or "held" when the key
-- holds its token without one (the element was popped, and the reply
-- lost): the caller then takes the lock, or releases it. Else false.
-- With KEYS[5]: a waiter that leaves from the front of the queue while
-- the key is not a single lock's (free, readers, permits) wakes the
-- waiters behind it as a release does (the wake-up list, "redlock:wake"):
-- readers queued behind a writer that gave up would else wait for their
-- recheck while newcomers pass them.
local front = KEYS[5] and redis.call('ZRANGE', KEYS[2], 0, 0)[1] == ARGV[1]
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
local handed = redis.call('LPOP', KEYS[4])
redis.call('DEL', KEYS[4])
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  local s = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
  v = type(s) == 'string' and tonumber(s) > 0 and ARGV[1]
end
if front and type(v) ~= 'string' and redis.call('EXISTS', KEYS[2]) == 1 then
  if redis.call('EXISTS', KEYS[5]) == 0 then redis.call('RPUSH', KEYS[5], '1') end
  redis.call('PEXPIRE', KEYS[5], 1000)
  redis.call('PUBLISH', 'redlock:wake', KEYS[1])
end
if v ~= ARGV[1] then return false end
return handed or 'held'
