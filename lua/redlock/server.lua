--- One Redis server as a lock client sees it: a lazily made connection, its
-- name for messages, a retry on a connection the server had dropped, and the
-- lock operations in the mode this server uses. Internal.
local core = require "redlock.core"
local scripted = require "redlock.scripted"

local setmetatable = setmetatable

local Server = {}
Server.__index = Server

local _M = {}

--- spec: a checked server table; mode: "auto", "script" or "legacy".
function _M.new(spec, mode)
    local conn = core.conn(spec)
    return setmetatable({
        conn = conn,
        name = conn:name(),
        mode = mode,
        -- The operations this server runs: auto starts with the scripts and
        -- may switch once (see redlock.legacy).
        ops = scripted,
    }, Server)
end

--- Runs a command; nil, message, code on failure. A connection that the
-- server closed since its last use (idle timeout, restart, CLIENT KILL) is
-- not a failure of this call: it reconnects and sends once more.
function Server:call(...)
    local conn = self.conn
    local r, err, code, stale = conn:command(...)
    if r == nil and stale then r, err, code = conn:command(...) end
    return r, err, code
end

--- Runs a named script of the core (EVALSHA, EVAL on NOSCRIPT).
function Server:eval(name, nkeys, ...)
    local conn = self.conn
    local r, err, code, stale = conn:eval(name, nkeys, ...)
    if r == nil and stale then r, err, code = conn:eval(name, nkeys, ...) end
    return r, err, code
end

--- Lock operations, one server. acquire returns true, fence | false, pttl
-- (another holder; pttl -1 when the key has no expiry) | nil, err, code.
-- claim (optional): see redlock.scripted.
function Server:acquire(key, token, ttl, claim) return self.ops.acquire(self, key, token, ttl, claim) end
--- true | false (not ours any more) | nil, err, code
function Server:release(key, token) return self.ops.release(self, key, token) end
--- true | false (not ours any more) | nil, err, code
function Server:extend(key, token, ttl) return self.ops.extend(self, key, token, ttl) end

--- Waits for a release of key, at most ms: true when it waited (notified
-- waiting), nil when these ops cannot and the caller must sleep.
function Server:wait(key, ms)
    local wait = self.ops.wait
    if wait then return wait(self, key, ms) end
    return nil
end

function Server:close()
    self.conn:close()
    if self.waiter then self.waiter:close() end
end

return _M
