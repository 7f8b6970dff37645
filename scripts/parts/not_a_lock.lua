-- A key that is not a string is no single lock (included where `cur`,
-- the key's redis.pcall('GET', key), is a table: Redis' WRONGTYPE).
-- Readers (a sorted set with the member "shared", see rw_read.lua) hold
-- it: `cur` becomes "" (held by another) for a writer to wait. Anything else answers {2, limit}
-- (limit 0: not a semaphore either, e.g. another application's hash),
-- which the caller reports as misuse; `at` (a group's index of the key)
-- ends the answer, or nil: the answer ends before it.
if redis.pcall('ZSCORE', key, 'shared') == '-1' then cur = ''
else
  local l = redis.pcall('ZSCORE', key, 'limit')
  return {2, type(l) == 'string' and -tonumber(l) or 0, at}
end
