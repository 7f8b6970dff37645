--- The single-instance strategy: one server decides. Internal.
-- A strategy answers for a whole client:
--   acquire(client, key, token, ttl [, waiting, again, unfenced, rep,
--           hook, bound, place])      -> true, fence[, acked]
--                                     | false, pttl, where  (another holder)
--                                     | nil, err, code
--   release(client, key, token)      -> true | false, where | nil, err, code
--                                     (Redlock's also takes valid_until,
--                                       hook: see redlock.quorum)
--   extend(client, key, token, ttl [, rep])
--                                     -> true[, acked] | false, where | nil, err, code
--   (rep: the options of a lock that waits for replicas, redlock.replicas;
--   acked: how many acknowledged its write)
--   wait(client, key, ms, since, token, final, owner, place)
--                                     -> true (waited for a release, or ms;
--                                       final: ms ends at the caller's
--                                       deadline, and the wait not later)
--                                     | "handed", fence, since (the release
--                                       handed the lock to token's waiter)
--                                     | nil (cannot: the caller sleeps)
--                                     (token: the waiter's when it may be
--                                       handed the lock, else nil; owner:
--                                       the waiter's token, always)
--                                     (place: the acquire's own table
--                                       given to each attempt, see
--                                       redlock.quorum.acquire)
--                                     (optional: without it, acquire polls)
--   give_up(client, key, token)      a waiter that wait() served gives up
--                                     (with wait); "handed", fence, since
--                                     when a lock was handed to it first
local lock_ops = require "redlock.ops"

local pairs = pairs

local _M = { name = "single" }

-- How this strategy reads a Server method's answer (redlock.ops's
-- single): a refusal names the server (the method's errors have the mode
-- note already).
local function taken(server, ok, v, code)
    if ok then return true, v, code end -- (code: acked, with rep)
    if ok == false then return false, v, server:where() end
    return ok, v, code
end

local function flag(server, ok, v, code)
    if ok == false then return false, server:where() end
    return ok, v, code -- (true[, acked] | nil, err, code)
end

--- The outcome of server's acquire operation as this strategy answers it:
-- a refusal names the server, an error gets the mode note. (For
-- operations run here directly: redlock.lua's uncontended request of a
-- script-mode server, a kind's own script.)
function _M.acquired(server, ok, v, code)
    if ok == nil then return server:noted(ok, v, code) end
    return taken(server, ok, v, code)
end

--- The same for a release.
function _M.released(server, ok, err, code)
    if ok then return true end
    if ok == nil then return server:noted(ok, err, code) end
    return flag(server, ok)
end

-- Every operation of redlock.ops: the server's method, its answer read as
-- the operation says. waiting, handoff (acquire): a notified waiter's (see
-- redlock.scripted.acquire). (redlock.lua makes the uncontended requests
-- of a script-mode server itself, see its acquire and release.)
local READ = { taken = taken, flag = flag }
for name, op in pairs(lock_ops.list) do
    local read = READ[op.single]
    if read then
        _M[name] = function(client, ...)
            local server = client.servers[1]
            return read(server, server[name](server, ...))
        end
    else
        _M[name] = function(client, ...)
            local server = client.servers[1]
            return server[name](server, ...)
        end
    end
end

function _M.wait(client, key, ms, since, token, final)
    return client.servers[1]:wait(key, ms, since, token, final)
end

return _M
