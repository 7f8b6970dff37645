-- KEYS[1] lock key, then for a caller that waits for a release (notified
-- waiting) KEYS[2] the waiters queue, KEYS[3] the waiters' data and
-- KEYS[4] the caller's own hand-off list (all with the lock key's hash
-- tag), then, when the caller wants a fence, the fence counter last (so: 2
-- or 5 keys with a fence, 1 or 4 without); ARGV[1] token, ARGV[2] ttl in
-- ms, ARGV[3] (a waiter) ms its next block lasts at most (its remaining
-- wait, at most redlock.notify's RECHECK_MS), ARGV[4] (a waiter) "h" when
-- it blocks on its hand-off list and may be handed the lock, "p" when it
-- may be handed the lock and learns of it from a message (inside nginx,
-- see release.lua), "w" when it only wants to be woken.
-- With four or five keys, ARGV[3] "0": a caller that does not wait (it is
-- refused, never queued), and ARGV[5] (optional; Redlock's callers) a bound
-- in ms: a free key is refused, as held with pttl -1, to a caller that
-- came that long or more after the first live waiter before it in the
-- queue (parts/kept.lua). Such a waiter, once it has waited the bound, is
-- passed by no newcomer, while waiters that came within the bound of each
-- other compete. ARGV[6] (optional; a Redlock waiter, which takes a new
-- token for each attempt; "" for none) its last attempt's token: the
-- place that token had in the queue is this one's (its data goes; the new
-- token's is written as the refusal queues it). ARGV[7] (optional; a
-- Redlock waiter once one of its attempts was queued by a majority) its
-- place, microseconds: the median of the places that attempt got, the
-- same on every server, so that every server orders any two such waiters
-- alike and a grant taken back does not send the waiter to the back (a
-- place each server gave by its own clock could differ between servers,
-- each granting another front: votes split for good).
-- Returns {1, fence} when we hold the lock (fence 0 when none was asked
-- for), {0, pttl} when another holder does (pttl -1: the key has no expiry,
-- e.g. written by hand), and to a waiter {0, pttl, server ms, its place}
-- (server ms 0 and no place without TIME, before Redis 3.2).
-- The fence is taken before the key is written: a counter that fails
-- (not a number, out of memory, no permission) leaves nothing held.
-- Every grant takes a new fence, our own token found again included: the
-- fence given with a lost reply was never seen. Our own token already
-- there counts as held by us, with the ttl refreshed: that makes a retry
-- after a lost reply succeed instead of locking itself out; a waiter that
-- finds the lock handed to it before it blocked takes it that way too.
-- A refused waiter joins the waiters queue in the same step, at the back
-- the first time (a later attempt keeps its place; not ZADD NX, which
-- Redis before 3.0.2 lacks), with its data
-- "alive-until ttl fenced": the server ms until which it counts as waiting
-- (its next block is bounded by the holder's pttl and ARGV[3]; a waiter
-- that has not asked again by then, plus SLACK, is skipped and dropped, so
-- one that died costs a hand-off at most once), and for
-- "h" and "p" the ttl and fence a hand-off gives it (ttl 0: wake it only;
-- fenced 0 or 1, plus 2 for "p": an older release, which knows 0 and 1
-- only, hands such a waiter the lock unfenced by its list, and the
-- waiter's next attempt takes it with a fence). The
-- queue and the data live at least as long as any member counts as
-- waiting: a release (even one that comes before the waiter blocks) knows
-- to hand over or wake, and without waiters does no such work. A refusal
-- also empties the waiter's hand-off list: whatever is there is left from
-- a hand-off that has ended (the key would hold our token otherwise), and
-- must not be taken for a new one. A waiter leaves the queue when it gets
-- the lock (a queue left empty is gone), or when it gives up.
--@include parts/fence.lua
--@include parts/young.lua
--@include parts/kept.lua
local n = #KEYS
local counter = (n == 2 or n == 5) and KEYS[n]
local waiting = n >= 4
local cur = redis.pcall('GET', KEYS[1])
if type(cur) == 'table' then
  local key, at = KEYS[1], nil
  --@include parts/not_a_lock.lua
end
local bound, score = tonumber(ARGV[5]), seeded and ARGV[7] or nil
if ARGV[6] and ARGV[6] ~= '' and seeded then
  -- a Redlock waiter's new token takes its last token's place in the queue
  local was = redis.call('ZSCORE', KEYS[2], ARGV[6])
  if was then
    redis.call('ZREM', KEYS[2], ARGV[6])
    redis.call('HDEL', KEYS[3], ARGV[6])
    if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then redis.call('ZADD', KEYS[2], score or was, ARGV[1]) end
  end
end
local pttl
if cur and cur ~= ARGV[1] then
  pttl = redis.call('PTTL', KEYS[1])
elseif not cur and bound and seeded and kept(KEYS[2], KEYS[3], ARGV[1], score, bound, redis.call('TIME')) then
  pttl = -1
end
if pttl then
  if not waiting or ARGV[3] == '0' then return {0, pttl} end
  if not seeded then
    redis.call('DEL', KEYS[4])
    if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
      redis.call('ZADD', KEYS[2], 0, ARGV[1])
    end
    if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[3]) then
      redis.call('PEXPIRE', KEYS[2], ARGV[3])
    end
    return {0, pttl, 0}
  end
  --@include parts/now.lua
  local wait_ms, how, mark = ARGV[3], ARGV[4], ''
  --@include parts/join_queue.lua
end
local f = fence(counter)
if cur then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
if waiting then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('DEL', KEYS[4])
end
return {1, f}
