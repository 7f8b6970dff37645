--- The "auto" mode: the operations a server runs until its mode is known.
-- On the first use it asks the server's version (INFO, once). A server
-- older than 2.6.12 (no SET NX PX for the scripts) switches to legacy; a
-- newer one (or one that hides its version) runs the script, and switches to
-- legacy if scripting is refused (see refused), to script mode once a
-- script has run (even when the WAIT sent with it failed). Anything else
-- decides nothing, the next use asks again:
-- a connection error, a wrong password or a user the server refuses (AUTH
-- fails before any script is sent), any other server error.
--
-- A server found without scripting is asked again on a new connection
-- (the server may have restarted, or been given scripting since): the
-- first acquire on it runs the detection again, and a server that now runs
-- the script is in script mode from then on. The switch waits until no
-- lock this client took there in legacy mode can still be held (their
-- values are legacy ones, which only legacy mode releases and extends).
-- Internal.
local core = require "redlock.core"
local legacy = require "redlock.legacy"
local scripted = require "redlock.scripted"

local now = core.now
local find, lower, type, pairs = string.find, string.lower, type, pairs

local _M = { name = "auto" }

-- The first version whose SET has NX and PX, which the scripts use.
local SCRIPTS_SINCE = 20612

-- Errors about who we are, never about scripting: AUTH refused when the
-- connection was made (a wrong password, a disabled user), or a command
-- sent before AUTH. (Redis says "WRONGPASS ... or user is disabled".)
local function credentials(e)
    return find(e, "auth failed", 1, true) ~= nil or find(e, "wrongpass", 1, true) ~= nil
        or find(e, "noauth", 1, true) ~= nil or find(e, "invalid password", 1, true) ~= nil
        or find(e, "select failed", 1, true) ~= nil
end

--- Whether a server error to EVALSHA/EVAL says scripting is not available
-- here: the command is unknown (renamed away, too old, refused by a proxy),
-- the script cannot be loaded (NOSCRIPT after EVAL), scripting is disabled,
-- or the user may not run scripts (an ACL without +@scripting). Errors of
-- the credentials, busy, loading, read-only and out-of-memory errors are
-- not refusals, nor are those of the WAITAOF sent with a script (a master
-- without appendonly says "... appendonly is disabled").
function _M.refused(err)
    if type(err) ~= "string" then return false end
    local e = lower(err)
    if credentials(e) or find(e, "waitaof", 1, true) then return false end
    local eval = find(e, "eval", 1, true) ~= nil
    return (eval and find(e, "unknown command", 1, true) ~= nil)
        or find(e, "noscript", 1, true) ~= nil
        or find(e, "disabled", 1, true) ~= nil
        or (find(e, "noperm", 1, true) ~= nil and find(e, "'eval", 1, true) ~= nil)
end

-- The legacy operations of a server that auto mode found without
-- scripting: legacy's, which also keep the locks they took that may still
-- be held (server.legacy_held: token -> expiry, monotonic ms), and an
-- acquire that asks again on a new connection (see the top of this file).
local fallen = {}
for k, v in pairs(legacy) do fallen[k] = v end
_M.legacy = fallen

-- Forgets the locks of server.legacy_held that have expired; returns how
-- many are left.
local function prune(server)
    local held, t, n = server.legacy_held, now(), 0
    for token, until_ms in pairs(held) do
        if until_ms <= t then held[token] = nil else n = n + 1 end
    end
    -- (locks never released are forgotten here: prune again at twice as many)
    server.legacy_prune = 2 * n + 64
    server.legacy_n = n
    return n
end

local function hold_until(server, token, t)
    local held = server.legacy_held
    if held[token] == nil then
        server.legacy_n = server.legacy_n + 1
        if server.legacy_n > server.legacy_prune then prune(server) end
    end
    held[token] = t
end

-- Whether no lock this client took on server in legacy mode can still be
-- held: none is being renewed, none is unreleased and unexpired.
local function settled(server)
    return server.legacy_renewing == 0 and prune(server) == 0
end

local function fall_back(server)
    server.ops = fallen
    server.decided_on = server:connects()
    if not server.legacy_held then
        server.legacy_held, server.legacy_n, server.legacy_prune = {}, 0, 64
        server.legacy_renewing = 0
    end
end

function fallen.acquire(server, key, token, ttl, ...)
    if server.decided_on ~= server:connects() and settled(server) then
        server.ops, server.caps = _M, nil
        return _M.acquire(server, key, token, ttl, ...)
    end
    local t = now()
    local ok, v, c = legacy.acquire(server, key, token, ttl, ...)
    if ok then hold_until(server, token, t + ttl) end
    return ok, v, c
end

local function forget(server, token)
    if server.legacy_held[token] then
        server.legacy_held[token] = nil
        server.legacy_n = server.legacy_n - 1
    end
end

function fallen.extend(server, key, token, ttl, ...)
    local t = now()
    local ok, v, c = legacy.extend(server, key, token, ttl, ...)
    if ok then
        hold_until(server, token, t + ttl)
    elseif ok == false then
        forget(server, token)
    end
    return ok, v, c
end

function fallen.release(server, key, token)
    local ok, v, c = legacy.release(server, key, token)
    if ok ~= nil then forget(server, token) end
    return ok, v, c
end

--- The renewal thread starts (delta 1) or stops (delta -1) renewing the
-- lock of token, ttl on server in legacy mode (redlock.hold): while any is
-- renewed, the server stays in legacy mode, and after it until its last
-- renewal can have expired. Returns whether it counted (a start on a
-- server of another mode is not).
function _M.renewing(server, delta, token, ttl)
    if delta > 0 and server.ops ~= fallen then return false end
    server.legacy_renewing = server.legacy_renewing + delta
    if delta < 0 and server.legacy_held[token] then hold_until(server, token, now() + ttl) end
    return true
end

local function run(name)
    return function(server, ...)
        local caps, err, code = legacy.caps(server)
        if not caps then return nil, err, code end
        if caps.version and caps.version < SCRIPTS_SINCE then
            fall_back(server)
            return fallen[name](server, ...)
        end
        server.script_ran = nil
        local ok, v, c = scripted[name](server, ...)
        -- (a script that ran decides, even when the WAIT sent with it
        -- failed: redlock.scripted sets script_ran then)
        if ok ~= nil or server.script_ran then
            server.ops = scripted
        elseif c == "server" and _M.refused(v) then
            fall_back(server)
            return fallen[name](server, ...)
        end
        return ok, v, c
    end
end

_M.acquire = run("acquire")
_M.release = run("release")
_M.extend = run("extend")

--- The note an error message of this server gets: its mode, and for a
-- refusal in script mode, what happens or what to do about it. A server
-- that auto mode had found running scripts and now refuses them (it
-- restarted without scripting, its user lost +@scripting) is asked again
-- at its next use.
function _M.note(server, err)
    local mode = server.ops.name
    if mode == "legacy" then return " (legacy mode)" end
    if mode == "script" and _M.refused(err) then
        if server.mode == "auto" and not server.scripts_only then
            server.ops, server.caps = _M, nil
            return " (this server refuses scripting now; mode \"auto\" detects its mode again)"
        end
        return " (script mode: this server refuses scripting; use mode \"auto\" or \"legacy\")"
    end
    return ""
end

return _M
