--- Eviction: a server with `maxmemory` and an eviction policy other than
-- `noeviction` may delete a held lock's key under memory pressure (the
-- allkeys-* policies any key, the volatile-* ones any key with a ttl, which
-- every lock key has), and a second holder then takes the lock at once,
-- silently. Looked at once per server and client, on the first attempt that
-- the server answered, from the INFO that redlock.legacy.caps asks once
-- anyway (auto mode asks it on the first use; script mode and Redlock ask
-- it here, once); a server before 3.2 (whose INFO has no maxmemory_policy)
-- is asked `CONFIG GET maxmemory*`. A server that lets us read neither is
-- not warned about. An evicting server gives an on_event "warning" to each
-- client that meets it, and one line in the log per process (stderr;
-- inside nginx, ngx.log(ngx.WARN)). Internal: redlock.lua and
-- redlock.quorum call check().
local legacy = require "redlock.legacy"
local events = require "redlock.events"

local format, type, tonumber, rawget = string.format, type, tonumber, rawget

local _M = {}

-- The servers already written to the log by this process, by name.
local logged = {}

local function log(msg)
    local ngx = rawget(_G, "ngx")
    if type(ngx) == "table" and ngx.log then
        ngx.log(ngx.WARN, msg)
    else
        io.stderr:write(msg, "\n")
    end
end

-- policy, maxmemory (bytes) of a server before 3.2, or nil.
local function from_config(server)
    local r = server:call("CONFIG", "GET", "maxmemory*")
    if type(r) ~= "table" then return nil end
    local policy, maxmemory
    for i = 1, #r - 1, 2 do
        if r[i] == "maxmemory-policy" then policy = r[i + 1] end
        if r[i] == "maxmemory" then maxmemory = tonumber(r[i + 1]) end
    end
    return policy, maxmemory
end

--- The warning for a server, or nil when its policy cannot evict a lock.
-- policy: maxmemory-policy; maxmemory: bytes (0: no limit).
function _M.message(name, policy, maxmemory)
    if not policy or policy == "noeviction" or not maxmemory or maxmemory == 0 then return nil end
    return format("%s may evict lock keys: maxmemory-policy %s with maxmemory %d; under memory pressure"
        .. " Redis can delete a held lock and let a second holder in (use noeviction on lock servers:"
        .. " docs/guarantees.md#eviction)", name, policy, maxmemory)
end

--- Looks at server's eviction policy once (server.policy: the policy
-- read, or false when none could be), and warns of one that can evict a
-- held lock: hook (opts.on_event, or nil) gets { type = "warning", server
-- =, err = message, policy =, key = }, the log one line per server and
-- process. A connection error leaves it for the next attempt. Never fails
-- the lock operation.
function _M.check(client, server, hook, key)
    local caps = legacy.caps(server)
    if not caps then return end -- (connection: next time)
    local policy, maxmemory = caps.policy, caps.maxmemory
    if policy == nil and caps.version and caps.version < 30200 then
        policy, maxmemory = from_config(server)
    end
    server.policy = policy or false
    local msg = _M.message(server.name, policy, maxmemory)
    if not msg then return end
    if not logged[server.name] then
        logged[server.name] = true
        log("redlock: warning: " .. msg)
    end
    if hook then
        events.emit(client, hook, { type = "warning", key = key, server = server.name, err = msg,
            policy = policy })
    end
end

return _M
