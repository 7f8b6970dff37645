-- Gives a permit back. KEYS[1] the key, KEYS[2] the waiters queue, KEYS[3]
-- the waiters' data, KEYS[4] the wake-up list, KEYS[5] the fence counter;
-- ARGV[1] token, ARGV[2] what a waiter's hand-off list is named, less its
-- token, ARGV[3] (optional; fair = false) a bound in ms: a front waiter
-- that has waited less (the server's clock, from its place's score:
-- young, parts/young.lua) is
-- not handed a permit but woken to compete for it, as
-- parts/serve_queue.lua does for a lock, and the hand-offs stop there
-- (sem_acquire.lua lets a newcomer pass such waiters). Answers 0 (not
-- ours: no unexpired permit of that token; the "limit" member is no
-- permit), 1 (given back), 2 (misuse: the key holds
-- a value that is no semaphore, e.g. readers or another application's
-- sorted set; read before anything is written, and nothing is), 3 (given
-- back, and waiters served). A waiter queued with another limit (misuse)
-- is woken and dropped, never handed a permit: its next attempt learns
-- of the mismatch. Each permit free after ours is gone goes to the next
-- live semaphore waiter of the queue, front first, in this same step (its
-- token with its own ttl as in release.lua's hand-off, a new fence, and
-- "fence server-ms" told it by parts/hand.lua: its hand-off list, or a
-- message to its worker's subscriber inside nginx); a waiter that is only
-- woken (replicas; inside nginx before its worker's subscriber listens)
-- stops the hand-offs there and is woken, as release.lua does; so does a
-- hand-off whose fence fails (see parts/serve_queue.lua). The key's
-- PEXPIRE follows its latest permit; no permit left deletes it.
--@include parts/fence.lua
--@include parts/hand.lua
--@include parts/young.lua
if not seeded then return 0 end
local key = KEYS[1]
local kind = redis.call('TYPE', key).ok
if kind == 'none' or kind == 'string' then return 0 end
local l = kind == 'zset' and redis.call('ZSCORE', key, 'limit')
if not l then return 2 end
--@include parts/now.lua
redis.call('ZREMRANGEBYSCORE', key, 0, now)
local s = redis.call('ZSCORE', key, ARGV[1])
if not s or tonumber(s) <= 0 then
--@include parts/set_ttl.lua
  return 0
end
redis.call('ZREM', key, ARGV[1])
local free = -tonumber(l) - (redis.call('ZCARD', key) - 1)
local r, wake = 1, false
local bound = tonumber(ARGV[3])
while free > 0 do
  local top = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  local front = top[1]
  if not front then break end
  local d = redis.call('HGET', KEYS[3], front)
  local alive, ttl, fenced, n
  if d then alive, ttl, fenced, n = string.match(d, '^(%d+) (%d+) (%d) s(%d*)$') end
  if alive and n ~= '' and tonumber(n) ~= -tonumber(l) then alive, wake = nil, true end
  if alive and tonumber(alive) >= now then
    if ttl == '0' then wake = true break end
    if bound and young(tonumber(top[2]), clock_us(t), bound) then
      r = 3
      if fenced == '2' or fenced == '3' or not nudge(front) then wake = true end
      break
    end
    local f = hand_fence(fenced)
    if not f then wake = true break end
    if not hand(front, f, ttl, now, fenced) then wake = true break end
    redis.call('ZADD', key, string.format('%.0f', now + tonumber(ttl)), front)
    free, r = free - 1, 3
  elseif not alive then wake = true
  end
  redis.call('ZREM', KEYS[2], front)
  redis.call('HDEL', KEYS[3], front)
end
--@include parts/set_ttl.lua
if not wake then return r end
if redis.call('EXISTS', KEYS[4]) == 0 then redis.call('RPUSH', KEYS[4], '1') end
redis.call('PEXPIRE', KEYS[4], 1000)
redis.call('PUBLISH', 'redlock:wake', key)
return 3
