-- Counting semaphores (limit = N) keep their permits in the lock key itself,
-- a sorted set: member "limit" with score -N (the limit, negative so that
-- the prune below never removes it), and per permit the holder's token
-- with its expiry (server ms) as score. The key's own PEXPIRE is the
-- latest permit's expiry, so the key exists exactly while some permit is
-- unexpired, and a plain `SET key x NX` (or a single lock) sees it held.
-- Every script that reads permits first drops the expired ones (score <=
-- now): each permit expires on its own, at its own time.
--
-- A permit of a counting semaphore (the layout above). KEYS[1] the
-- key, KEYS[2] the waiters queue, KEYS[3] the waiters' data, KEYS[4] the
-- caller's hand-off list, KEYS[5] the fence counter (the single lock's
-- companions and counter; a waiter's data ends " s<its limit>", so that only
-- semaphore waiters are handed permits, and no other release hands a
-- semaphore waiter a lock); ARGV[1] token, ARGV[2] ttl ms, ARGV[3] the
-- limit N, ARGV[4] "0" for a caller that does not wait, else the ms its
-- next block lasts at most (as acquire.lua's ARGV[3]), ARGV[5] "h" or "w" (as
-- acquire.lua's ARGV[4]), ARGV[6] "1" for a fence, "0" for none, ARGV[7]
-- (optional; fair = false) a bound in ms: a live waiter that has waited
-- less (the server's clock, from its place's score: young,
-- parts/young.lua) is not counted as queued before the caller (see
-- sem_release.lua).
-- Answers {1, fence} (granted; 0 without a fence), {0, ms until the
-- earliest permit expires[, server ms]} (refused; a waiter joins the
-- queue as in acquire.lua), {2, M} (misuse: the key is a semaphore of limit M,
-- or M = 0: it is no semaphore, e.g. a single lock's string).
-- A permit is granted when fewer than N unexpired permits exist and fewer
-- live waiters than free permits are queued before the caller (a newcomer
-- queues behind every waiter: the first waiter gets a freed permit; a
-- live waiter there queued with another limit is misuse, {2, its limit},
-- as the queue outlives the key); our
-- own token found again is refreshed (a retry after a lost reply, or a
-- hand-off found before its BLPOP). The limit is read before anything is
-- written: a different N is refused while any permit is unexpired.
--@include parts/fence.lua
--@include parts/young.lua
if not seeded then return redis.error_reply('semaphores need Redis 3.2 or later') end
local key, limit, ttl = KEYS[1], tonumber(ARGV[3]), tonumber(ARGV[2])
local counter = ARGV[6] == '1' and KEYS[5]
--@include parts/now.lua
local kind = redis.call('TYPE', key).ok
if kind == 'zset' then
  local l = redis.call('ZSCORE', key, 'limit')
  if not l then return {2, 0} end
  redis.call('ZREMRANGEBYSCORE', key, 0, now)
  if redis.call('ZCARD', key) == 1 then redis.call('DEL', key)
  elseif -tonumber(l) ~= limit then return {2, -tonumber(l)} end
elseif kind ~= 'none' then return {2, 0} end
local marker, marker_score = 'limit', -limit
--@include parts/holders_grant.lua
if redis.call('ZSCORE', key, ARGV[1]) then return grant() end
local free = limit - math.max(0, redis.call('ZCARD', key) - 1)
local ahead, i = 0, 0
local bound = tonumber(ARGV[7])
while ahead < free do
  local top = redis.call('ZRANGE', KEYS[2], i, i, 'WITHSCORES')
  local m = top[1]
  if not m or m == ARGV[1] then break end
  local d = redis.call('HGET', KEYS[3], m)
  local alive, n
  if d then alive, n = string.match(d, '^(%d+) %d+ %d s(%d*)$') end
  if alive and tonumber(alive) >= now and n ~= '' and tonumber(n) ~= limit then
    return {2, tonumber(n)}
  end
  if alive and tonumber(alive) >= now then
    if not (bound and young(tonumber(top[2]), clock_us(t), bound)) then ahead = ahead + 1 end
    i = i + 1
  else redis.call('ZREM', KEYS[2], m) redis.call('HDEL', KEYS[3], m) end
end
if free > ahead then return grant() end
local first = redis.call('ZRANGE', key, 1, 1, 'WITHSCORES')
local pttl = first[2] and math.max(0, tonumber(first[2]) - now) or 0
if ARGV[4] == '0' then return {0, pttl} end
local wait_ms, how, mark, score = ARGV[4], ARGV[5], ' s' .. ARGV[3], nil
--@include parts/join_queue.lua
