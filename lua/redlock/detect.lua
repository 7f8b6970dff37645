--- The "auto" mode: the operations a server runs until its mode is known.
-- On the first use it asks the server's version (INFO, once). A server
-- older than 2.6.12 (no SET NX PX for the scripts) switches to legacy; a
-- newer one (or one that hides its version) runs the script, and switches to
-- legacy if scripting is refused, to script mode once a script has run
-- (even when the WAIT sent with it failed). A
-- connection error, or any other server error, decides nothing: the next use
-- asks again. The choice is kept for the life of the client. Internal.
local legacy = require "redlock.legacy"
local scripted = require "redlock.scripted"

local find, lower, type = string.find, string.lower, type

local _M = { name = "auto" }

-- The first version whose SET has NX and PX, which the scripts use.
local SCRIPTS_SINCE = 20612

--- Whether a server error to EVALSHA/EVAL says scripting is not available
-- here: the command is unknown (renamed away, too old, refused by a proxy),
-- the script cannot be loaded (NOSCRIPT after EVAL), it is disabled, or the
-- user may not run it. Busy, loading, read-only and out-of-memory errors
-- are passing states, not refusals.
function _M.refused(err)
    if type(err) ~= "string" then return false end
    local e = lower(err)
    return find(e, "unknown command", 1, true) ~= nil
        or find(e, "noscript", 1, true) ~= nil
        or find(e, "disabled", 1, true) ~= nil
        or (find(e, "noperm", 1, true) ~= nil and find(e, "'eval", 1, true) ~= nil)
end

local function run(name)
    return function(server, ...)
        local caps, err, code = legacy.caps(server)
        if not caps then return nil, err, code end
        if caps.version and caps.version < SCRIPTS_SINCE then
            server.ops = legacy
            return legacy[name](server, ...)
        end
        local ok, v, c = scripted[name](server, ...)
        -- (a script that ran decides, also when the WAIT sent with it
        -- failed: "unknown command 'WAIT'" before 3.0, "appendonly is
        -- disabled" for WAITAOF, are no refusal of scripting)
        if ok ~= nil or server.script_ran then
            server.ops = scripted
        elseif c == "server" and _M.refused(v) then
            server.ops = legacy
            return legacy[name](server, ...)
        end
        return ok, v, c
    end
end

_M.acquire = run("acquire")
_M.release = run("release")
_M.extend = run("extend")

--- The note an error message of this server gets: its mode, and for a
-- refusal in script mode (which never falls back), what to do about it.
function _M.note(server, err)
    local mode = server.ops.name
    if mode == "legacy" then return " (legacy mode)" end
    -- (an error of the WAIT sent with a script names WAIT: no refusal)
    if mode == "script" and _M.refused(err) and not find(err, "WAIT", 1, true) then
        return " (script mode: this server refuses scripting; use mode \"auto\" or \"legacy\")"
    end
    return ""
end

return _M
