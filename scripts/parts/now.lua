-- now: the server's clock in ms (TIME), as `t` and `now`.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
