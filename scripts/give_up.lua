-- KEYS[1] lock key, KEYS[2] the waiters queue, KEYS[3] the waiters' data,
-- KEYS[4] the caller's hand-off list; ARGV[1] token. A waiter that gives
-- up leaves the queue; if the lock was handed to it meanwhile, the answer
-- is its hand-off's element ("fence server-ms", as BLPOP would have
-- returned it), or "held" when the key holds its token without one (the
-- element was popped, and the reply lost): the caller then takes the lock,
-- or releases it. Else false.
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
local handed = redis.call('LPOP', KEYS[4])
redis.call('DEL', KEYS[4])
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
return handed or 'held'
