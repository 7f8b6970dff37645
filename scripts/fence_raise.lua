-- KEYS[1] fence counter; ARGV[1] a fence. Raises the counter to at least
-- the fence, never lowers it; returns the counter. Redlock writes a lock's
-- fence back to the servers that granted it, so that the next majority,
-- which shares a server with this one, counts past it.
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local f = tonumber(ARGV[1])
if c < f then redis.call('SET', KEYS[1], ARGV[1]) return f end
return c
