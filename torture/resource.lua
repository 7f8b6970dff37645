--- The fenced resource: a redis-server of its own (never faulted) whose
-- one script keeps, per key, a value and the largest fence written. A
-- read or write carrying a smaller fence is refused; a read-for-update
-- (raise) and every write raise the fence seen; each accepted write is
-- logged (`log:KEY`: "id fence expected current new", so a write made
-- from a stale read shows as expected ~= current: a lost update).
-- Permits count their holders instead (enter/leave, logged with the
-- count). Reached through its unix socket, so clients in other network
-- namespaces reach it too.
local format = string.format

local _M = {}

_M.SCRIPT = [[
local op = ARGV[1]
if op == 'read' or op == 'write' then
  local seen = tonumber(redis.call('GET', KEYS[1]) or '0')
  if tonumber(ARGV[2]) < seen then return {0, tostring(redis.call('GET', KEYS[1]))} end
  if op == 'read' then
    if ARGV[3] == '1' and tonumber(ARGV[2]) > seen then redis.call('SET', KEYS[1], ARGV[2]) end
    return {1, redis.call('GET', KEYS[2]) or '0'}
  end
  redis.call('SET', KEYS[1], ARGV[2])
  local cur = redis.call('GET', KEYS[2]) or '0'
  redis.call('RPUSH', KEYS[3], ARGV[5] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. cur .. ' ' .. ARGV[4])
  redis.call('SET', KEYS[2], ARGV[4])
  return {1, cur}
end
if op == 'enter' then
  redis.call('SADD', KEYS[1], ARGV[2])
  local n = redis.call('SCARD', KEYS[1])
  redis.call('RPUSH', KEYS[2], 'enter ' .. ARGV[2] .. ' ' .. n)
  return {1, tostring(n)}
end
if op == 'leave' then
  redis.call('SREM', KEYS[1], ARGV[2])
  redis.call('RPUSH', KEYS[2], 'leave ' .. ARGV[2])
  return {1, '0'}
end
return redis.error_reply('unknown op ' .. tostring(op))
]]

local function fence_text(f) return format("%.0f", f) end

--- The operations over call(cmd, ...) -> reply | nil, err (a redlock.core
-- conn's command, or a cosocket's). Each returns ok (the fence was
-- accepted), the value (read, write: the value before) or the fence seen,
-- or nil, err when the resource could not be asked.
function _M.ops(call)
    local script = _M.SCRIPT
    local unpack = table.unpack or unpack
    local function run(keys, ...)
        local args = { "EVAL", script, tostring(#keys) }
        for _, k in ipairs(keys) do args[#args + 1] = k end
        for i = 1, select("#", ...) do args[#args + 1] = select(i, ...) end
        local r, err = call(unpack(args))
        if type(r) ~= "table" then return nil, tostring(err or r) end
        return r[1] == 1, r[2]
    end
    local o = {}
    function o.read(key, fence, raise)
        return run({ "seen:" .. key, "val:" .. key, "x" }, "read", fence_text(fence), raise and "1" or "0")
    end
    function o.write(key, fence, expected, new, id)
        return run({ "seen:" .. key, "val:" .. key, "log:" .. key }, "write", fence_text(fence),
            tostring(expected), tostring(new), id)
    end
    function o.enter(key, id) return run({ "in:" .. key, "log:" .. key }, "enter", id) end
    function o.leave(key, id) return run({ "in:" .. key, "log:" .. key }, "leave", id) end
    return o
end

return _M
