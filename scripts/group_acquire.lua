-- A group lock: several keys at once, all or nothing, each in the single
-- lock's layout (SET key token PX ttl, one token for the group), so a
-- group and a single lock of one of its keys exclude each other. KEYS[1..n]
-- the keys (one server, or one Cluster slot), then the fence counter when
-- one is asked for; ARGV[1] token, ARGV[2] ttl ms, ARGV[3] n.
-- Answers {1, fence of key 1, ..., fence of key n} (fences 0 without a
-- counter), {0, pttl, i} (key i is held by another token, or by readers:
-- nothing was written), {2, M, i} (misuse: key i is a semaphore of limit
-- M, or M = 0 not a lock at all). Every key is read, and every fence
-- taken (a counter that fails leaves nothing held), before any key is
-- written.
--@include parts/fence.lua
local n = tonumber(ARGV[3])
local counter = #KEYS > n and KEYS[n + 1]
local mine = {}
for i = 1, n do
  local cur = redis.pcall('GET', KEYS[i])
  if type(cur) == 'table' then
    local key, at = KEYS[i], i
    --@include parts/not_a_lock.lua
  end
  if cur and cur ~= ARGV[1] then return {0, redis.call('PTTL', KEYS[i]), i} end
  mine[i] = cur
end
local out = {1}
for i = 1, n do out[i + 1] = fence(counter) end
for i = 1, n do
  if mine[i] then redis.call('PEXPIRE', KEYS[i], ARGV[2])
  else redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2]) end
end
return out
