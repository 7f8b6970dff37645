-- KEYS[1] fence counter; ARGV[1] a fence. Raises the counter to at least
-- the fence, never lowers it: the stream's last ID to the fence's (an
-- explicit XADD, refused when the last ID is already higher), or a string
-- counter's value. Returns 1, or the server's error (never 1 without
-- the counter raised). Redlock writes a lock's fence back to the
-- servers that granted it, so that the next majority, which shares a
-- server with this one, counts past it.
--@include parts/fence.lua
local f = tonumber(ARGV[1])
local s = f % 100
local r = xadd(KEYS[1], string.format('%.0f-%d', (f - s) / 100 + EPOCH, s))
if type(r) == 'string' or failed(r, 'smaller') then return 1 end
if not (failed(r, 'nknown') or failed(r, 'WRONGTYPE')) then return redis.error_reply(r.err) end
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c < f then redis.call('SET', KEYS[1], ARGV[1]) end
return 1
