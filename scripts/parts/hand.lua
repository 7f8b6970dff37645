-- The hand-off of a freed key or permit to the waiter `front` (its token)
-- in the release's atomic step (parts/serve_queue.lua, sem_release.lua),
-- by how it joined (its data's `fenced`, see acquire.lua):
-- hand_fence(fenced) takes its fence when it asked for one (try_fence on
-- KEYS[5], the counter: false when the counter fails, 0 without one);
-- hand(front, f, ttl, now, fenced) tells it "fence server-ms": pushed to
-- its hand-off list (ARGV[2] .. front), which lives ttl ms, for a waiter
-- that blocks on it ("h"), or published as "<token> fence server-ms" on
-- "redlock:wake" for one inside nginx ("p": its worker's subscriber hands
-- it to that waiter, redlock.nginx.wait); false when the server refused
-- (the caller then wakes the waiters instead). Needs try_fence
-- (parts/fence.lua).
-- nudge(front) wakes that waiter to compete instead (it is not handed
-- anything): "w" pushed twice to its hand-off list, unless the list
-- exists (its BLPOP takes one; the other says it is on its way until its
-- next attempt empties the list, and releases meanwhile wake it no more);
-- false when the server refused (the caller then wakes the waiters).
local function hand_fence(fenced)
  return try_fence((fenced == '1' or fenced == '3') and KEYS[5])
end
-- luacheck: push ignore 211/nudge
local function nudge(front)
  local list = ARGV[2] .. front
  if redis.pcall('EXISTS', list) == 1 then return true end
  if type(redis.pcall('RPUSH', list, 'w', 'w')) ~= 'number' then return false end
  redis.call('PEXPIRE', list, 1000)
  return true
end
-- luacheck: pop
local function hand(front, f, ttl, now, fenced)
  local element = string.format('%.0f %.0f', f, now)
  if fenced == '2' or fenced == '3' then
    local sent = redis.pcall('PUBLISH', 'redlock:wake', front .. ' ' .. element)
    return type(sent) == 'number'
  end
  local list = ARGV[2] .. front
  local pushed = redis.pcall('RPUSH', list, element)
  if type(pushed) ~= 'number' then return false end
  redis.call('PEXPIRE', list, ttl)
  return true
end
