-- The key KEYS[1] given up by its holder (a single lock, a writer, the
-- last reader) goes to the front of the waiters queue (KEYS[2], data
-- KEYS[3], wake-up list KEYS[4], fence counter KEYS[5]; ARGV[2] the
-- hand-off lists' prefix), in the same step; `seeded` and `try_fence`
-- from parts/fence.lua, `key` KEYS[1]. Waiters that no longer count as waiting
-- are dropped on the way. A writer (or single-lock) waiter that may be
-- handed the key ("h" or "p") gets it: SET key <its token> PX <its ttl>, a
-- new fence when it asked for one, "fence server-ms" told it
-- (parts/hand.lua: pushed to its list, or published). Live
-- readers at the front (data ending " r", see rw_read.lua) are let in
-- together: the key becomes a readers set (member "shared", and each
-- reader's token with its expiry), each reader handed "fence server-ms",
-- up to the first waiter that is not such a reader (a writer waits for
-- them); a node that refuses to create the set (a Cluster slot migrating)
-- wakes them instead. A waiter that is only woken, or a server without TIME: the key
-- is deleted and the wake-up list holds one element for 1 s (see release.lua),
-- and the key is published on "redlock:wake". A hand-off whose fence
-- fails (a counter of another type, no permission for XADD) wakes the
-- waiters instead (their own acquire then fails at its fence, before it
-- writes): each fence is taken before the key is written for that
-- waiter, and the key, handed to nobody, is deleted, or keeps the readers
-- already let in with their ttl, never left without one. The writer's key
-- is set before its list is pushed: a waiter never reads a hand-off of a
-- key that does not hold its token. Answers 1 (deleted, nobody served), 3
-- (handed over or woken).
-- A waiter at the front that is only woken, on its own list (fenced 4 or
-- 5: a Redlock waiter, see parts/join_queue.lua), is woken on that list:
-- the key deleted, nudge (parts/hand.lua).
-- With ARGV[3] (a bound, ms; fair = false), a writer (or single-lock)
-- waiter at the front that may be handed the key but has waited less than
-- the bound (the server's clock, from its first refused attempt: its score
-- in the queue, microseconds; young, parts/young.lua: a score later than
-- the clock now counts as old) is not handed it: the key is deleted, and
-- that waiter woken to compete with the next acquirer (nudge, on the
-- hand-off list it blocks on; a waiter inside nginx, or a list the node
-- refuses, by the wake-up list and "redlock:wake"). Once it has
-- waited longer, the release hands it the key as above, before any
-- newcomer.
local wake = not seeded
local bound = tonumber(ARGV[3])
local function waiter()
  local top = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  local front = top[1]
  if not front then return nil end
  local d = redis.call('HGET', KEYS[3], front)
  local alive, ttl, fenced, rd
  if d then alive, ttl, fenced, rd = string.match(d, '^(%d+) (%d+) (%d)( ?r?)$') end
  return front, alive, ttl, fenced, rd == ' r', top[2]
end
local function leave(front)
  redis.call('ZREM', KEYS[2], front)
  redis.call('HDEL', KEYS[3], front)
end
--@include parts/hand.lua
--@include parts/young.lua
if seeded then
--@include parts/now.lua
  local admitted = 0
  while true do
    local front, alive, ttl, fenced, reader, since = waiter()
    if not front then break end
    if not alive then wake = true end
    if alive and tonumber(alive) >= now then
      if ttl == '0' and admitted == 0 and not reader and tonumber(fenced) >= 4 then
        redis.call('DEL', KEYS[1])
        if not nudge(front) then wake = true break end
        return 3
      end
      if ttl == '0' or (admitted > 0 and not reader) then
        wake = wake or (ttl == '0' and (reader or admitted == 0))
        break
      end
      if bound and not reader and young(tonumber(since), clock_us(t), bound) then
        redis.call('DEL', KEYS[1])
        if fenced == '2' or fenced == '3' or not nudge(front) then wake = true break end
        return 3
      end
      local f = hand_fence(fenced)
      if not f then wake = true break end
      if reader then
        if admitted == 0 then
          redis.call('DEL', KEYS[1])
          if type(redis.pcall('ZADD', KEYS[1], -1, 'shared')) ~= 'number' then wake = true break end
        end
        if not hand(front, f, ttl, now, fenced) then wake = true break end
        redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ttl)), front)
        admitted = admitted + 1
      else
        redis.call('SET', KEYS[1], front, 'PX', ttl)
        if not hand(front, f, ttl, now, fenced) then wake = true break end
        leave(front)
        return 3
      end
    end
    leave(front)
  end
  if admitted > 0 then
--@include parts/set_ttl.lua
  end
  if admitted > 0 and not wake then return 3 end
  if admitted == 0 then redis.call('DEL', KEYS[1]) end
else
  redis.call('DEL', KEYS[1])
end
if not wake then return 1 end
if redis.call('EXISTS', KEYS[4]) == 0 then redis.call('RPUSH', KEYS[4], '1') end
redis.call('PEXPIRE', KEYS[4], 1000)
redis.call('PUBLISH', 'redlock:wake', KEYS[1])
return 3
