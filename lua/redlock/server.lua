--- One Redis server as a lock client sees it: a lazily made connection, its
-- name for messages, a retry on a connection the server had dropped, and the
-- lock operations in the mode this server uses. Internal.
local core = require "redlock.core"
local detect = require "redlock.detect"
local legacy = require "redlock.legacy"
local addresses = require "redlock.addresses"
local scripted = require "redlock.scripted"

local lock_ops = require "redlock.ops"

local setmetatable, type, pairs, gsub = setmetatable, type, pairs, string.gsub
local ops_for, missing = detect.ops_for, lock_ops.missing

-- The operations per opts.mode; auto's replace themselves on first use.
local OPS = { script = scripted, legacy = legacy, auto = detect }

local Server = {}
Server.__index = Server

local _M = {}

--- The state a server keeps for its locks, set in `server` (this module's
-- and redlock.nginx.cosocket's: one list for both).
function _M.lock_state(server, spec)
    -- fence counters per slot, not per server (redlock.util.fence_counter)
    server.slot_fences = spec.cluster ~= nil
    -- the uncontended acquire may go without a script (conn:grant,
    -- redlock.scripted.grant) once a script ran here (the release
    -- needs one: a server that refuses scripting says so at the first
    -- acquire, not at its release); a Cluster's, and a server's without
    -- streams (before Redis 5), take the scripts' way. The connects()
    -- count of the connection a script ran on (false: none yet): a new
    -- connection may reach a server that refuses scripting now
    server.grants = false
    server.can_grant = spec.cluster == nil
    -- conn:connects() of the connection grant turned itself off on
    -- (no streams there, or XADD refused): the next one tries again
    server.grants_off = false
    -- read by every lock (redlock.lua, redlock.scripted): present, so
    -- that a read does not go on to the metatable
    server.refused, server.refused_until, server.contended, server.woke_key = false, 0, false, false
    -- (redlock.detect: the locks auto mode took in legacy mode)
    server.legacy_held = false
    return server
end

--- spec: a checked server table; mode: "auto", "script" or "legacy".
function _M.new(spec, mode)
    local conn = core.conn(spec.sentinels and addresses.sentinel_conn_spec(spec) or spec)
    local self = setmetatable({
        conn = conn,
        name = conn:name(),
        mode = mode,
        -- The operations this server runs: auto detects on the first use
        -- and switches to scripted or legacy (see redlock.detect, which
        -- also says when it asks again). A Cluster always has scripting
        -- (Redis 3.0 and later).
        ops = spec.cluster and scripted or OPS[mode or "auto"],
        scripts_only = spec.cluster ~= nil,
        -- (the state of its locks: lock_state)
    }, Server)
    return _M.lock_state(self, spec)
end

--- Runs a command; nil, message, code on failure. A connection that the
-- server closed since its last use (idle timeout, restart, CLIENT KILL) is
-- not a failure of this call: the conn reconnects and sends once more.
function Server:call(...)
    local r, err, code = self.conn:command(...)
    return r, err, code
end

--- Runs a named script of the core (EVALSHA, EVAL on NOSCRIPT; sent once
-- more on a stale connection by the connection itself).
function Server:eval(name, nkeys, ...)
    local r, err, code = self.conn:eval(name, nkeys, ...)
    return r, err, code
end

--- The mode this server runs in: "script", "legacy", or nil while auto
-- has not yet decided.
function Server:chosen_mode()
    local name = self.ops.name
    if name == "auto" then return nil end
    return name
end

--- The server as messages name it: with its mode when that is legacy.
function Server:where()
    if self.ops.name == "legacy" then return self.name .. " (legacy mode)" end
    return self.name
end

--- How many connections to this server have been made: a new one may
-- reach a server with other settings (redlock.detect asks again).
function Server:connects() return self.conn:connects() end

-- Error messages say the mode (see redlock.detect.note).
local function noted(server, ok, v, code)
    if ok == nil and type(v) == "string" and code ~= "closed" then
        -- Redis echoes an unknown command's arguments (the token among them)
        v = gsub(gsub(v, ", with args beginning with:.*$", ""), "%s+$", "")
        v = v .. detect.note(server, v)
    end
    return ok, v, code
end

--- ok, v, code of an operation, with the mode in an error's message.
Server.noted = noted

--- Lock operations, one server: a method per operation of redlock.ops
-- (its answers: redlock.single's strategy interface, less the server's
-- name), run by the operations of the server's mode, or by those that
-- took the lock (redlock.detect.ops_for), with the mode in an error's
-- message. A mode without the operation: nil (optional) or
-- redlock.ops.cannot's error.
-- acquire(key, token, ttl, waiting, handoff, unfenced, rep) -> true, fence
-- | false, pttl (another holder; -1 when the key has no expiry) | nil, err,
-- code (waiting, handoff: see redlock.scripted; rep: replica
-- acknowledgement, redlock.replicas: a lock taken answers true, fence,
-- acked); release(key, token) -> true | false (not ours any more) | nil,
-- err, code; extend(key, token, ttl, rep) -> true[, acked] | false | nil,
-- err, code; give_up(key, token): see redlock.scripted.
local function method(name, op)
    local none = missing(name)
    if op.by_token then
        return function(self, key, token, ...)
            local f = ops_for(self, token)[name]
            if not f then return noted(self, none(self)) end
            return noted(self, f(self, key, token, ...))
        end
    end
    return function(self, ...)
        local f = self.ops[name]
        if not f then return noted(self, none(self)) end
        return noted(self, f(self, ...))
    end
end
for name, op in pairs(lock_ops.list) do Server[name] = method(name, op) end

--- Waits for a release of key, at most ms: true when it waited (notified
-- waiting), "handed", fence, since when the release handed it the lock
-- (token: the waiter's, when it may be; redlock.notify), nil when these
-- ops cannot and the caller must sleep. (since, when the failed attempt
-- was sent, serves redlock.nginx.cosocket's wait, and so does give_back, a
-- kind's release; final: ms ends at the caller's deadline, see
-- redlock.notify.)
function Server:wait(key, ms, _, token, final)
    local wait = self.ops.wait
    if wait then return wait(self, key, ms, token, final) end
    return nil
end

--- The redlock.conn whose settings the renewal thread copies (it makes
-- connections of its own).
function Server:renewal_conn() return self.conn end

function Server:close()
    self.conn:close()
    if self.waiter then self.waiter:close() end
end

-- For redlock.nginx.cosocket, whose servers inherit these methods.
_M.Server = Server
--- How this transport waits between attempts: a blocking sleep (ms).
_M.sleep = core.sleep
--- How this transport asks several servers at once (redlock.quorum):
-- poll() over their hiredis connections.
_M.fanout_eval = core.fanout_eval
--- The same with WAIT after the script (replica acknowledgement).
_M.fanout_eval_wait = core.fanout_eval_wait

return _M
