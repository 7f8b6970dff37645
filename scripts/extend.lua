-- KEYS[1] lock key; ARGV[1] token, ARGV[2] new ttl in ms.
-- Compare-and-PEXPIRE: a bare EXPIRE could extend somebody else's lock.
-- A semaphore's permit (the key a sorted set, see sem_acquire.lua) is extended the
-- same way: its score moves to now + ttl if it has not expired, and the
-- key's PEXPIRE follows the latest permit. One script for every kind, so
-- the renewal thread renews permits as it renews locks. A sorted set
-- without our marker member ("limit" or "shared") is another
-- application's: 0, and nothing is touched.
local v = redis.pcall('GET', KEYS[1])
if v == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if type(v) ~= 'table' or redis.call('TYPE', KEYS[1]).ok ~= 'zset' then return 0 end
if not (redis.call('ZSCORE', KEYS[1], 'limit') or redis.call('ZSCORE', KEYS[1], 'shared')) then return 0 end
if not (redis.replicate_commands and redis.replicate_commands()) then return 0 end
--@include parts/now.lua
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) <= 0 then return 0 end
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
local key = KEYS[1]
--@include parts/set_ttl.lua
return 1
