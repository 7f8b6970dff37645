--- The single-instance strategy: one server decides. Internal.
-- A strategy answers for a whole client:
--   acquire(client, key, token, ttl) -> true, fence
--                                     | false, pttl, where  (another holder)
--                                     | nil, err, code
--   release(client, key, token)      -> true | false, where | nil, err, code
--   extend(client, key, token, ttl)  -> true | false, where | nil, err, code
local _M = { name = "single" }

function _M.acquire(client, key, token, ttl)
    local server = client.servers[1]
    local ok, v, code = server:acquire(key, token, ttl)
    if ok == false then return false, v, server:where() end
    return ok, v, code
end

function _M.release(client, key, token)
    local server = client.servers[1]
    local ok, err, code = server:release(key, token)
    if ok == false then return false, server:where() end
    return ok, err, code
end

function _M.extend(client, key, token, ttl)
    local server = client.servers[1]
    local ok, err, code = server:extend(key, token, ttl)
    if ok == false then return false, server:where() end
    return ok, err, code
end

return _M
