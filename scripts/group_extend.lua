-- KEYS[1..n] a group's keys; ARGV[1] token, ARGV[2] ttl ms. PEXPIRE of
-- each key that holds the token; answers 1 when every key did, else 0.
local n = 0
for i = 1, #KEYS do
  if redis.pcall('GET', KEYS[i]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
    n = n + 1
  end
end
return n == #KEYS and 1 or 0
