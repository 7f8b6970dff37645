--- Replica acknowledgement (opts.replicas, replica_timeout, aof): what the
-- answer of WAIT (or WAITAOF) sent with a lock script means, and the
-- messages of a lock that was not acknowledged. The C core sends the WAIT
-- in the same write as the script (conn:eval_wait, core.fanout_eval_wait)
-- and reads its answer (csrc/topology/wait.h). Internal.
local wait_short = require("redlock.core").wait_short
local match, tostring = string.match, tostring

local _M = {}

--- Whether checked options `o` ask for acknowledgement: replicas >= 1, or
-- aof (WAITAOF, which with replicas = 0 waits for the master's own fsync).
function _M.asked(o) return o.replicas > 0 or o.aof == true end

--- Why `acked` replicas (and `fsynced` local AOF fsyncs, WAITAOF only) are
-- not enough for rep, as a message "replicas: <server>: ..."; nil when
-- they are enough (the core's rule, csrc/topology/wait.h).
function _M.shortfall(name, rep, acked, fsynced, what)
    return wait_short(name, what, rep.replicas, rep.replica_timeout, rep.aof, acked, fsynced)
end

--- A failed WAIT's message (it starts with "server:" or "connection:";
-- the core words it, a WAIT the server does not know included) and code.
function _M.wait_failed(_, _, msg)
    return msg, match(msg, "^(%a+):") or "server"
end

--- A failed acquire's message once the lock was taken back: ok, err of the
-- release.
function _M.released(msg, ok, err)
    if ok then return msg .. "; the lock was released" end
    if ok == false then return msg .. "; the lock was gone already" end
    return msg .. "; releasing it failed too, it expires after its ttl (" .. tostring(err) .. ")"
end

return _M
