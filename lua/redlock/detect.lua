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
-- lock this client took there in legacy mode can still be held.
--
-- Whatever the switches, a lock is released and extended (by Lua, nginx
-- timers or the renewal thread) by the operations that took it on each
-- server (ops_for): a legacy value only legacy mode knows, a script-mode
-- value only the scripts.
-- Internal.
local core = require "redlock.core"
local legacy = require "redlock.legacy"
local scripted = require "redlock.scripted"
local lock_ops = require "redlock.ops"

local now = core.now
local find, lower, type, pairs, format = string.find, string.lower, type, pairs, string.format
local huge = math.huge
local missing = lock_ops.missing

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

-- What a server or proxy says when scripting itself is switched off (a
-- proxy's "ERR command is disabled", "scripting is disabled"): never a bare
-- "disabled", which Redis's MISCONF ("Commands that may modify the data set
-- are disabled ...": a failed RDB save) and "user is disabled" also say.
local function scripting_off(e)
    return find(e, "command is disabled", 1, true) ~= nil or find(e, "command disabled", 1, true) ~= nil
        or find(e, "scripting is disabled", 1, true) ~= nil or find(e, "script is disabled", 1, true) ~= nil
end

--- Whether a server error to EVALSHA/EVAL says scripting is not available
-- here: the command is unknown (renamed away, too old, refused by a proxy),
-- the script cannot be loaded (NOSCRIPT after EVAL), scripting is switched
-- off (see scripting_off), or the user may not run scripts (NOPERM for
-- eval, evalsha or script: an ACL without +@scripting). Errors of the
-- credentials, MISCONF (a failed save), busy, loading, read-only and
-- out-of-memory errors, and NOPERM for keys, are not refusals.
function _M.refused(err)
    if type(err) ~= "string" then return false end
    local e = lower(err)
    if credentials(e) or find(e, "misconf", 1, true) then return false end
    return (find(e, "unknown command", 1, true) ~= nil and find(e, "eval", 1, true) ~= nil)
        or find(e, "noscript", 1, true) ~= nil
        or scripting_off(e)
        or (find(e, "noperm", 1, true) ~= nil
            and (find(e, "'eval", 1, true) ~= nil or find(e, "'script", 1, true) ~= nil))
end

-- The legacy operations of a server that auto mode found without
-- scripting: legacy's, which also keep the locks they took that may still
-- be held (server.legacy_held: token -> expiry, monotonic ms), and an
-- acquire that asks again on a new connection (see the top of this file).
-- A lock is released and extended by the operations that took it (see
-- ops_for), whatever the server's mode is by then.
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

local function forget(server, token)
    if server.legacy_held[token] then
        server.legacy_held[token] = nil
        server.legacy_n = server.legacy_n - 1
    end
end

-- Whether no lock this client took on server in legacy mode can still be
-- held: none is being renewed, none is unreleased and unexpired, none is
-- being taken (recorded before its request).
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

--- Whether a lock auto mode took on server in legacy mode may still be held.
function _M.holds_legacy(server)
    return server.legacy_n ~= nil and server.legacy_n > 0 and prune(server) > 0
end

--- The operations that release and extend the lock of token on server:
-- those that took it, whatever the server's mode is now (a mode "auto"
-- server may have changed mode since). A lock taken in legacy mode is in
-- server.legacy_held until it can no longer be held; any other lock on a
-- server that auto mode found without scripting was taken by script before
-- (server.script_seen), or never on this server.
function _M.ops_for(server, token)
    local ops, held = server.ops, server.legacy_held
    if not held then return ops end
    if held[token] then return fallen end
    if ops == fallen and server.script_seen then return scripted end
    return ops
end

-- Asks a server found without scripting again, on a new connection: its
-- version, then the acquire by script. Nothing is published while it waits
-- (inside nginx other callers keep the legacy operations meanwhile, and one
-- probe runs at a time): server.ops changes once, when the script has run.
-- Returns true and the acquire's outcome when that decided (script mode) or
-- failed (the error stands, and the next acquire asks again); false when
-- the server still has no scripting (the legacy acquire follows).
local function probe(server, key, token, ttl, ...)
    server.probing = true
    server.caps = nil -- (a restarted server may be another version)
    local caps, err, code = legacy.caps(server)
    if not caps then
        server.probing = false
        return true, nil, err, code
    end
    if caps.version and caps.version < SCRIPTS_SINCE then
        server.probing, server.decided_on = false, server:connects()
        return false
    end
    local ok, v, c = scripted.acquire(server, key, token, ttl, ...)
    server.probing = false
    if ok == nil and c == "server" and _M.refused(v) then
        server.decided_on = server:connects()
        return false
    end
    if ok ~= nil then server.ops, server.script_seen = scripted, true end
    return true, ok, v, c
end

-- A legacy acquire or extend is recorded before its request (a lock in
-- flight, or whose reply is lost after it was applied, may be held) and
-- again after its reply (its expiry counts from then); forgotten when the
-- server answers that it is not ours.
function fallen.acquire(server, key, token, ttl, ...)
    if server.decided_on ~= server:connects() and not server.probing and settled(server) then
        local decided, ok, v, c = probe(server, key, token, ttl, ...)
        if decided then return ok, v, c end
    end
    hold_until(server, token, now() + ttl)
    local ok, v, c = legacy.acquire(server, key, token, ttl, ...)
    if ok == false then forget(server, token) else hold_until(server, token, now() + ttl) end
    return ok, v, c
end

function fallen.extend(server, key, token, ttl, ...)
    hold_until(server, token, now() + ttl)
    local ok, v, c = legacy.extend(server, key, token, ttl, ...)
    if ok == false then forget(server, token) else hold_until(server, token, now() + ttl) end
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
-- renewal can have expired. Returns whether it counted (a lock this
-- server's auto mode did not take in legacy mode is not).
function _M.renewing(server, delta, token, ttl)
    local held = server.legacy_held
    if delta > 0 then
        if not (held and held[token]) then return false end
        server.legacy_renewing = server.legacy_renewing + 1
        held[token] = huge -- renewed: held until its renewal stops
        return true
    end
    server.legacy_renewing = server.legacy_renewing - 1
    if held[token] then held[token] = now() + ttl end
    return true
end

--- Mode "auto" decides before the first script of a lock kind (a permit,
-- a read lock, a group: redlock.semaphore, redlock.group), which sends its
-- own scripts and would else leave the server undecided for good (no
-- notified waiting, no leaving the queue). As for a single lock: a server
-- older than 2.6.12 switches to legacy mode, which cannot take the kind
-- (nil, message, "server"); else true, and the kind's script follows, whose
-- outcome settles the rest (settled). what: "a permit", ...
function _M.settle(server, what)
    if server.ops ~= _M then return true end
    local caps, err, code = legacy.caps(server)
    if not caps then return nil, err, code end
    if caps.version and caps.version < SCRIPTS_SINCE then
        fall_back(server)
        return nil, format("server: %s: %s needs the server's scripts: legacy mode (a server before Redis"
            .. " 2.6.12) cannot take it in one atomic step", server.name, what), "server"
    end
    return true
end

--- A kind's script ran (ran: it answered, whatever it answered) or
-- failed with err, code: a server of mode "auto" is in script mode from
-- now on, or, refusing scripting, in legacy mode (see settle).
function _M.settled(server, ran, err, code)
    if server.ops ~= _M then return end
    if ran then
        server.ops, server.script_seen = scripted, true
    elseif code == "server" and _M.refused(err) then
        fall_back(server)
    end
end

local function run(name)
    return function(server, ...)
        local caps, err, code = legacy.caps(server)
        if not caps then return nil, err, code end
        if caps.version and caps.version < SCRIPTS_SINCE then
            fall_back(server)
            return (fallen[name] or missing(name))(server, ...)
        end
        server.script_ran = nil
        local ok, v, c = scripted[name](server, ...)
        -- (a script that ran decides, even when the WAIT sent with it
        -- failed: redlock.scripted sets script_ran then)
        if ok ~= nil or server.script_ran then
            server.ops = scripted
        elseif c == "server" and _M.refused(v) then
            fall_back(server)
            return (fallen[name] or missing(name))(server, ...)
        end
        return ok, v, c
    end
end

-- every operation of redlock.ops that settles the mode first (one that
-- legacy mode lacks answers as redlock.ops.missing says, once fallen back)
for name, op in pairs(lock_ops.list) do
    if op.settle then _M[name] = run(name) end
end

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
            -- (its locks taken by script are still released by script)
            server.ops, server.caps, server.script_seen = _M, nil, true
            return " (this server refuses scripting now; mode \"auto\" detects its mode again)"
        end
        return " (script mode: this server refuses scripting; use mode \"auto\" or \"legacy\")"
    end
    return ""
end

return _M
