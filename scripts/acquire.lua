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
-- Returns {1, fence} when we hold the lock (fence 0 when none was asked
-- for), {0, pttl} when another holder does (pttl -1: the key has no expiry,
-- e.g. written by hand), and to a waiter {0, pttl, server ms} (0 without
-- TIME, before Redis 3.2).
-- The fence is taken before the key is written: a counter that fails
-- (not a number, out of memory, no permission) leaves nothing held.
-- Every grant takes a new fence, our own token found again included: the
-- fence given with a lost reply was never seen. Our own token already
-- there counts as held by us, with the ttl refreshed: that makes a retry
-- after a lost reply, or a Redlock retry that finds its own leftover key,
-- succeed instead of locking itself out; a waiter that finds the lock
-- handed to it before it blocked takes it that way too.
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
local n = #KEYS
local counter = (n == 2 or n == 5) and KEYS[n]
local waiting = n >= 4
local cur = redis.pcall('GET', KEYS[1])
if type(cur) == 'table' then
  local key, at = KEYS[1], nil
  --@include parts/not_a_lock.lua
end
if cur and cur ~= ARGV[1] then
  local pttl = redis.call('PTTL', KEYS[1])
  if not waiting then return {0, pttl} end
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
