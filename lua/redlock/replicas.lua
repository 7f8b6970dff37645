--- Replica acknowledgement (opts.replicas, replica_timeout, aof): what the
-- answer of WAIT (or WAITAOF) sent with a lock script means, and the
-- messages of a lock that was not acknowledged. The C core sends the WAIT
-- in the same write as the script (conn:eval_wait, core.fanout_eval_wait).
-- Internal.
local format, match, find, tostring = string.format, string.match, string.find, tostring

local _M = {}

--- Whether checked options `o` ask for acknowledgement: replicas >= 1, or
-- aof (WAITAOF, which with replicas = 0 waits for the master's own fsync).
function _M.asked(o) return o.replicas > 0 or o.aof == true end

--- Why `acked` replicas (and `fsynced` local AOF fsyncs, WAITAOF only) are
-- not enough for rep, as a message "replicas: <server>: ..."; nil when
-- they are enough.
function _M.shortfall(name, rep, acked, fsynced, what)
    if rep.aof then
        if acked >= rep.replicas and fsynced >= 1 then return nil end
        return format("replicas: %s: %s reached the AOF of %d of %d replicas%s within %d ms",
            name, what, acked, rep.replicas, fsynced >= 1 and "" or " and not the master's",
            rep.replica_timeout)
    end
    if acked >= rep.replicas then return nil end
    return format("replicas: %s: %d of %d replicas acknowledged %s within %d ms", name, acked,
        rep.replicas, what, rep.replica_timeout)
end

--- A failed WAIT's message (msg starts with "server:" or "connection:")
-- and code: WAIT or WAITAOF unknown to the server says which Redis it
-- needs.
function _M.wait_failed(name, rep, msg)
    local code = match(msg, "^(%a+):") or "server"
    -- (worded without "unknown command": mode "auto" would read that as a
    -- server without scripting, redlock.detect)
    if code == "server" and find(msg, "unknown command", 1, true) then
        if rep.aof then
            return format("server: %s: WAITAOF needs Redis 7.2+ (option aof; this server does not"
                .. " know the command)", name), "server"
        end
        return format("server: %s: WAIT needs Redis 3.0+ (option replicas; this server does not"
            .. " know the command)", name), "server"
    end
    return msg, code
end

--- A failed acquire's message once the lock was taken back: ok, err of the
-- release.
function _M.released(msg, ok, err)
    if ok then return msg .. "; the lock was released" end
    if ok == false then return msg .. "; the lock was gone already" end
    return msg .. "; releasing it failed too, it expires after its ttl (" .. tostring(err) .. ")"
end

return _M
