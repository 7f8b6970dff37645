-- KEYS[1] lock key, KEYS[2] fence counter. Returns {value or false, pttl,
-- counter}: what `redlock status` shows (the counter: the last fence the
-- server gave, for any key), read in one atomic step.
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]),
        tonumber(redis.call('GET', KEYS[2]) or '0')}
