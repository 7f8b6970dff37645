-- KEYS[1..n] a group's keys (one server or one slot), KEYS[n+1..2n] their
-- waiters queues; ARGV[1] token. Each key that holds the token is deleted
-- when nobody waits for it (no queue), else left for the single lock's
-- five-key release.lua, which hands it over or wakes its waiters (one
-- server: redlock.group; Redlock: redlock.quorum). Answers {how many held
-- the token, the indexes of those left...}.
local n, owned, left = #KEYS / 2, 0, {}
for i = 1, n do
  if redis.pcall('GET', KEYS[i]) == ARGV[1] then
    owned = owned + 1
    if redis.call('EXISTS', KEYS[n + i]) == 0 then redis.call('DEL', KEYS[i])
    else left[#left + 1] = i end
  end
end
table.insert(left, 1, owned)
return left
