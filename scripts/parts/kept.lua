-- The rule by which a free key is refused to a caller for a waiter that
-- came before it (Redlock's callers: acquire.lua's ARGV[5], a group's
-- group_acquire.lua). kept(queue, data, token, score, bound, t): true
-- when the first waiter of `queue` that still counts as waiting (`data`
-- its waiters' data; waiters that no longer count are dropped on the way,
-- as parts/serve_queue.lua drops them, and those without data, from a
-- version before the hand-off, passed over) comes before the caller
-- (`token`) and did not come less than `bound` ms before it (young,
-- parts/young.lua: a place later than the caller's arrival counts as
-- old). The caller's place is `score` (a string of microseconds: the one
-- a Redlock client sends, its first queued attempt's, see acquire.lua),
-- else its place in `queue`, and its arrival that place; without either
-- (a newcomer) the back of the queue, arriving at the server's clock now
-- (`t`, TIME's answer). A waiter whose place comes after the caller's
-- keeps nothing from it. Needs young and clock_us.
local function kept(queue, data, token, score, bound, t)
  local place = tonumber(score)
  if not place then
    local s = redis.call('ZSCORE', queue, token)
    place = s and tonumber(s)
  end
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local i = 0
  while true do
    local top = redis.call('ZRANGE', queue, i, i, 'WITHSCORES')
    local m = top[1]
    if not m or m == token or (place and tonumber(top[2]) > place) then return false end
    local d = redis.call('HGET', data, m)
    local alive = d and string.match(d, '^(%d+) ')
    if not alive then
      i = i + 1
    elseif tonumber(alive) < now_ms then
      redis.call('ZREM', queue, m)
      redis.call('HDEL', data, m)
    else
      return not young(tonumber(top[2]), place or clock_us(t), bound)
    end
  end
end
