-- KEYS[1] lock key; ARGV[1] token, ARGV[2] new ttl in ms.
-- Compare-and-PEXPIRE: a bare EXPIRE could extend somebody else's lock.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
