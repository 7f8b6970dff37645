-- The fence (included by the scripts that grant a lock): one
-- counter per server (per hash slot on a Cluster), for every lock key. On a
-- server with streams (Redis 5.0+) the counter is a stream kept empty
-- (MAXLEN 0 keeps its last ID): XADD * answers an ID "ms-seq" the server
-- makes greater than the stream's last one from its own clock (ms = the
-- later of its clock and the last ID's ms, seq counting within that ms),
-- and the fence is (ms - 2026-01-01 UTC) * 100 + seq: every grant raises
-- the counter to the clock in one atomic command (the acquire without a
-- script, conn:grant, sends the same XADD). A seq of 100 or more would
-- reach the next ms's fences: then the next ms's first ID is taken,
-- explicitly. A stream lost (restart without persistence, failover to a
-- replica that missed grants, FLUSHALL, eviction) starts again at the
-- clock: above every fence given before as long as the clock of the
-- server that answers is not behind the one that gave them (the same
-- millisecond aside). Without streams (before 5.0: XADD is unknown) the
-- counter is a string: INCR, raised to TIME when below it (TIME needs
-- effects replication before Redis 5: replicate_commands, called first;
-- a server without it, before 3.2, gets the counter alone). A string
-- counter met on a server with streams (a server upgraded from before
-- 5.0) is replaced by the stream, counting on above its value. Fences
-- stay below 10^14 until 2057: "%.14g" (tostring on Lua 5.1 and LuaJIT)
-- writes them whole. Every fence is 1 or more (0 means "no fence" to the
-- callers): a server clock before 2026 counts on from the epoch's first
-- IDs (its ms part at least the epoch's), still rising. `counter` is the
-- counter's key, or false when the caller asked for no fence. A failure
-- raises the server's error: a script takes it before its first write,
-- or with try_fence (false on a failure, the error caught) where a
-- failure must not stop it half-way (a release that hands the key on).
local seeded = redis.replicate_commands and redis.replicate_commands()
local EPOCH = 1767225600000 --@define REDLOCK_FENCE_EPOCH_MS
local function xadd(counter, id)
  return redis.pcall('XADD', counter, 'MAXLEN', '0', id, 'f', '1')
end
local function failed(r, what)
  return type(r) == 'table' and r.err and string.find(r.err, what, 1, true)
end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function counted(counter)
  local f = redis.call('INCR', counter)
  if seeded then
    local t = redis.call('TIME')
    local base = (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      - EPOCH) * 100
    if f < base then
      redis.call('SET', counter, string.format('%.0f', base))
      f = base
    end
  end
  return f
end
-- (fence and try_fence: not every script that includes this needs both)
-- luacheck: push ignore 211/fence 211/try_fence
local function fence(counter)
  if not counter then return 0 end
  local id, floor = xadd(counter, '*'), 0
  if type(id) ~= 'string' then
    if failed(id, 'nknown') then return counted(counter) end
    if failed(id, 'WRONGTYPE') then
      floor = redis.call('INCR', counter)
      redis.call('DEL', counter)
    end
    id = redis.call('XADD', counter, 'MAXLEN', '0', '*', 'f', '1')
  end
  local ms, seq = parse(id)
  local f = (ms - EPOCH) * 100 + seq
  if seq < 100 and f > floor then return f end
  if seq >= 100 then f = (ms + 1 - EPOCH) * 100 end
  if f <= floor then f = floor + 1 end
  local s = f % 100
  redis.call('XADD', counter, 'MAXLEN', '0',
    string.format('%.0f-%d', (f - s) / 100 + EPOCH, s), 'f', '1')
  return f
end
local function try_fence(counter)
  local ok, f = pcall(fence, counter)
  return ok and f
end
-- luacheck: pop
