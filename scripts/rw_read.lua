-- Readers and writers (opts.shared = true for a reader). A writer is a
-- single lock (acquire.lua, release.lua: SET key <token> PX ttl). Readers hold the
-- key as a sorted set: member "shared" with score -1, and each reader's
-- token with its expiry (server ms); the key's PEXPIRE is the latest
-- reader's expiry, so while any reader holds, the key exists (a plain SET
-- NX fails, and acquire.lua sees it held: its writer waits in the queue).
-- Waiting readers are in the same waiters queue as writers, their data
-- ending " r"; a writer waiting there keeps every reader that comes after
-- it out, and the release that frees the key lets the readers at the
-- front in together (parts/serve_queue.lua).
--
-- rw_read.lua: KEYS[1] key, KEYS[2] waiters queue, KEYS[3] their data,
-- KEYS[4] the caller's hand-off list, KEYS[5] fence counter; ARGV[1]
-- token, ARGV[2] ttl ms, ARGV[3] "0" for a caller that does not wait,
-- else the ms of its next block, ARGV[4] "h" or "w", ARGV[5] "1" for a
-- fence. Answers {1, fence}, {0, pttl[, server ms]} (a writer holds it,
-- or waits before us in the queue), {2, M} (misuse: a semaphore of limit
-- M, or another value). A reader is let in when the key is free or held
-- by readers, and no live writer waits before it in the queue.
--@include parts/fence.lua
--@include parts/young.lua
if not seeded then return redis.error_reply('readers need Redis 3.2 or later') end
local key, ttl = KEYS[1], tonumber(ARGV[2])
local counter = ARGV[5] == '1' and KEYS[5]
--@include parts/now.lua
local kind, pttl = redis.call('TYPE', key).ok, nil
if kind == 'string' then pttl = redis.call('PTTL', key)
elseif kind == 'zset' then
  if not redis.call('ZSCORE', key, 'shared') then
    local l = redis.call('ZSCORE', key, 'limit')
    return {2, l and -tonumber(l) or 0}
  end
  redis.call('ZREMRANGEBYSCORE', key, 0, now)
  if redis.call('ZCARD', key) == 1 then redis.call('DEL', key) kind = 'none' end
elseif kind ~= 'none' then return {2, 0} end
local marker, marker_score = 'shared', -1
--@include parts/holders_grant.lua
if kind == 'zset' and redis.call('ZSCORE', key, ARGV[1]) then return grant() end
if not pttl then
  local i, writer = 0, false
  while true do
    local m = redis.call('ZRANGE', KEYS[2], i, i)[1]
    if not m or m == ARGV[1] then break end
    local d = redis.call('HGET', KEYS[3], m)
    local alive, rd
    if d then alive, rd = string.match(d, '^(%d+) %d+ %d( ?r?)$') end
    if not alive or tonumber(alive) < now then
      redis.call('ZREM', KEYS[2], m)
      redis.call('HDEL', KEYS[3], m)
    elseif rd ~= ' r' then writer = true break
    else i = i + 1 end
  end
  if not writer then return grant() end
  pttl = kind == 'zset' and redis.call('PTTL', key) or 1000
end
if ARGV[3] == '0' then return {0, pttl} end
local wait_ms, how, mark, score = ARGV[3], ARGV[4], ' r', nil
--@include parts/join_queue.lua
