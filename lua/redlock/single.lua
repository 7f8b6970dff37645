--- The single-instance strategy: one server decides. Internal.
-- A strategy answers for a whole client:
--   acquire(client, key, token, ttl [, waiting, again, unfenced, rep])
--                                     -> true, fence[, acked]
--                                     | false, pttl, where  (another holder)
--                                     | nil, err, code
--   release(client, key, token)      -> true | false, where | nil, err, code
--   extend(client, key, token, ttl [, rep])
--                                     -> true[, acked] | false, where | nil, err, code
--   (rep: the options of a lock that waits for replicas, redlock.replicas;
--   acked: how many acknowledged its write)
--   wait(client, key, ms, since, token, final, owner)
--                                     -> true (waited for a release, or ms;
--                                       final: ms ends at the caller's
--                                       deadline, and the wait not later)
--                                     | "handed", fence, since (the release
--                                       handed the lock to token's waiter)
--                                     | nil (cannot: the caller sleeps)
--                                     (token: the waiter's when it may be
--                                       handed the lock, else nil; owner:
--                                       the waiter's token, always)
--                                     (optional: without it, acquire polls)
--   give_up(client, key, token)      a waiter that wait() served gives up
--                                     (with wait); "handed", fence, since
--                                     when a lock was handed to it first
local ops_for = require("redlock.detect").ops_for

local _M = { name = "single" }

--- The outcome of server's acquire operation as this strategy answers it:
-- a refusal names the server, an error gets the mode note.
local function acquired(server, ok, v, code)
    if ok then return true, v, code end -- (code: acked, with rep)
    if ok == false then return false, v, server:where() end
    return server:noted(ok, v, code)
end
_M.acquired = acquired

--- The same for a release.
local function released(server, ok, err, code)
    if ok then return true end
    if ok == false then return false, server:where() end
    return server:noted(ok, err, code)
end
_M.released = released

-- waiting, handoff: a notified waiter's (see redlock.scripted.acquire).
-- (The server's operations are called directly, as Server:acquire would;
-- redlock.lua makes the uncontended requests of a script-mode server
-- itself, see its acquire.)
function _M.acquire(client, key, token, ttl, waiting, handoff, unfenced, rep)
    local server = client.servers[1]
    return acquired(server, server.ops.acquire(server, key, token, ttl, waiting, handoff, unfenced, rep))
end

function _M.release(client, key, token)
    local server = client.servers[1]
    return released(server, ops_for(server, token).release(server, key, token))
end

function _M.extend(client, key, token, ttl, rep)
    local server = client.servers[1]
    local ok, err, code = server:extend(key, token, ttl, rep)
    if ok == false then return false, server:where() end
    return ok, err, code
end

--- A waiter that gives up leaves the waiters queue (best effort: a failure
-- leaves it to the queue's own expiry).
function _M.give_up(client, key, token)
    local server = client.servers[1]
    local give_up = server.ops.give_up
    if give_up then return give_up(server, key, token) end
end

function _M.wait(client, key, ms, since, token, final)
    return client.servers[1]:wait(key, ms, since, token, final)
end

return _M
