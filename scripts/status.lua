-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] (optional) its waiters
-- queue. Returns {value or false, pttl, counter, waiters}: what `redlock
-- status` shows (the counter: the last fence the server gave, for any key:
-- the fence of the stream's last ID, or the string counter of a server
-- without streams; waiters: how many are queued), read in one atomic step.
-- For a semaphore the value is {limit, token, ms left, token, ms left, ...}
-- (its unexpired permits, earliest first), for readers the same with -1
-- for the limit; {0} for a key of another type.
--@include parts/fence.lua
local last = 0
local kind = redis.call('TYPE', KEYS[2])
kind = type(kind) == 'table' and kind.ok or kind
if kind == 'stream' then
  local info = redis.call('XINFO', 'STREAM', KEYS[2])
  for i = 1, #info - 1, 2 do
    if info[i] == 'last-generated-id' then
      local ms, seq = parse(info[i + 1])
      last = (ms - EPOCH) * 100 + math.min(seq, 99)
    end
  end
elseif kind == 'string' then
  last = tonumber(redis.call('GET', KEYS[2])) or 0
end
local v = redis.pcall('GET', KEYS[1])
local out = {v, redis.call('PTTL', KEYS[1]), last,
  KEYS[3] and redis.call('ZCARD', KEYS[3]) or 0}
if type(v) == 'table' then
  out[1] = {0}
  local z = redis.call('TYPE', KEYS[1]).ok == 'zset'
  local l = z and (redis.call('ZSCORE', KEYS[1], 'limit') or redis.call('ZSCORE', KEYS[1], 'shared'))
  if l then
--@include parts/now.lua
    out[1][1] = l == '-1' and redis.call('ZSCORE', KEYS[1], 'shared') and -1 or -tonumber(l)
    local all = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
    for i = 1, #all, 2 do
      out[1][#out[1] + 1] = all[i]
      out[1][#out[1] + 1] = tonumber(all[i + 1]) - now
    end
  end
end
return out
