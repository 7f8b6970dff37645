-- The fence (Lua text shared by the scripts that grant a lock): one counter
-- per server (per hash slot on a Cluster), for every lock key: INCR, raised
-- to the server's clock when below it (a SET at most once a millisecond);
-- the clock in ms since 2026-01-01 UTC, times 100: strictly increasing
-- across all grants on the server, and, the counter being lost (restart
-- without persistence, failover to a replica that missed it), still above
-- every fence given before as long as the server's clock does not go back
-- (and fewer than 100 locks a millisecond were granted on average, more
-- than one Redis serves). Fences stay below 10^14 until 2057: "%.14g"
-- (tostring on Lua 5.1 and LuaJIT) writes them whole. (TIME needs effects
-- replication before Redis 5: replicate_commands, called first; a server
-- without it, before 3.2, gets the counter alone.) `counter` is the
-- counter's key, or false when the caller asked for no fence.
local seeded = redis.replicate_commands and redis.replicate_commands()
local function fence(counter)
  if not counter then return 0 end
  local f = redis.call('INCR', counter)
  if seeded then
    local t = redis.call('TIME')
    local base = (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      - 1767225600000) * 100
    if f < base then
      redis.call('SET', counter, string.format('%.0f', base))
      f = base
    end
  end
  return f
end
