-- A group lock that waits: it joins the waiters queue of the key that
-- refused it (KEYS[1]; KEYS[2] the queue, KEYS[3] the data, KEYS[4] the
-- caller's hand-off list, emptied) as a waiter that is only woken (ttl 0:
-- a release wakes it, nobody hands it one key of its group), and, as a
-- writer, keeps later readers out. ARGV[1] token, ARGV[2] the ms its next
-- block lasts at most. Answers {0, pttl, server ms} (queued), {1} (the key
-- is free or ours now: try again at once). A server without TIME (before
-- 3.2) queues it as acquire.lua does there (no data: every release wakes) and
-- answers {0, pttl, 0}.
local cur = redis.pcall('GET', KEYS[1])
if cur == false or cur == ARGV[1] then return {1} end
local counter = false
if not (redis.replicate_commands and redis.replicate_commands()) then
  redis.call('DEL', KEYS[4])
  if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then redis.call('ZADD', KEYS[2], 0, ARGV[1]) end
  if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
  return {0, redis.call('PTTL', KEYS[1]), 0}
end
--@include parts/young.lua
--@include parts/now.lua
local pttl = redis.call('PTTL', KEYS[1])
local wait_ms, how, mark, score = ARGV[2], 'w', '', nil
--@include parts/join_queue.lua
