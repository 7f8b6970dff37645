--- The single-instance strategy: one server decides. Internal.
-- A strategy answers for a whole client:
--   acquire(client, key, token, ttl [, waiting, again])
--                                     -> true, fence
--                                     | false, pttl, where  (another holder)
--                                     | nil, err, code
--   release(client, key, token)      -> true | false, where | nil, err, code
--   extend(client, key, token, ttl)  -> true | false, where | nil, err, code
--   wait(client, key, ms)            -> true (waited for a release, or ms)
--                                     | nil (cannot: the caller sleeps)
--                                     (optional: without it, acquire polls)
local _M = { name = "single" }

-- waiting, again: a notified waiter's (see redlock.scripted.acquire)
function _M.acquire(client, key, token, ttl, waiting, again)
    local server = client.servers[1]
    -- the server's operations called directly: this is the path every
    -- uncontended lock takes (Server:acquire does the same)
    local ok, v, code = server.ops.acquire(server, key, token, ttl, waiting, again)
    if ok then return true, v end
    if ok == false then return false, v, server:where() end
    return server:noted(ok, v, code)
end

function _M.release(client, key, token)
    local server = client.servers[1]
    local ok, err, code = server.ops.release(server, key, token)
    if ok then return true end
    if ok == false then return false, server:where() end
    return server:noted(ok, err, code)
end

function _M.extend(client, key, token, ttl)
    local server = client.servers[1]
    local ok, err, code = server:extend(key, token, ttl)
    if ok == false then return false, server:where() end
    return ok, err, code
end

function _M.wait(client, key, ms)
    return client.servers[1]:wait(key, ms)
end

return _M
