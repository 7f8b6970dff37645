-- A group lock: several keys at once, all or nothing, each in the single
-- lock's layout (SET key token PX ttl, one token for the group), so a
-- group and a single lock of one of its keys exclude each other. KEYS[1..n]
-- the keys (one server, or one Cluster slot), then the fence counter when
-- one is asked for; ARGV[1] token, ARGV[2] ttl ms, ARGV[3] n.
-- Over Redlock, ARGV[4] a bound in ms, and the keys' waiters queues and
-- their data after the counter (KEYS[q + i], KEYS[q + n + i] for key i):
-- a free key is refused, as held with pttl -1, when a waiter of its queue
-- came the bound or more before the group (parts/kept.lua, the single
-- lock's newcomer rule); ARGV[5] (optional) the group's score, its arrival
-- as its client knows it (see redlock.quorum's place_of; without one, the
-- server's clock now). A group takes no place in a queue.
-- Answers {1, fence of key 1, ..., fence of key n} (fences 0 without a
-- counter), {0, pttl, i} (key i is held by another token, or by readers,
-- or kept for a waiter: nothing was written; with ARGV[4], a 4th: the
-- server's clock in microseconds), {2, M, i} (misuse: key i is a semaphore
-- of limit M, or M = 0 not a lock at all). Every key is read, and every
-- fence taken (a counter that fails leaves nothing held), before any key
-- is written.
--@include parts/fence.lua
--@include parts/young.lua
--@include parts/kept.lua
local n = tonumber(ARGV[3])
local c = (#KEYS - n) % 2 -- (1: the fence counter is there)
local counter = c == 1 and KEYS[n + 1]
local bound = seeded and tonumber(ARGV[4])
local t = bound and redis.call('TIME')
local function refused(pttl, i)
  if t then return {0, pttl, i, clock_us(t)} end
  return {0, pttl, i}
end
local mine = {}
for i = 1, n do
  local cur = redis.pcall('GET', KEYS[i])
  if type(cur) == 'table' then
    local key, at = KEYS[i], i
    --@include parts/not_a_lock.lua
  end
  if cur and cur ~= ARGV[1] then return refused(redis.call('PTTL', KEYS[i]), i) end
  if not cur and bound and kept(KEYS[n + c + i], KEYS[2 * n + c + i], ARGV[1], ARGV[5], bound, t) then
    return refused(-1, i)
  end
  mine[i] = cur
end
local out = {1}
for i = 1, n do out[i + 1] = fence(counter) end
for i = 1, n do
  if mine[i] then redis.call('PEXPIRE', KEYS[i], ARGV[2])
  else redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2]) end
end
return out
