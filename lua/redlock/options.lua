--- Option checking for redlock.new and the per-call opts (the servers'
-- list is redlock.addresses'). Everything here runs once per client (or once
-- per call that passes opts); nothing here runs on the hot path of a call
-- without opts.
local addresses = require "redlock.addresses"

local tostring, type, pairs = tostring, type, pairs
local error, format, floor = error, string.format, math.floor

local _M = {}

-- Timeouts and sizes: csrc/defaults.h, the one definition for C and Lua.
local core_defaults = require("redlock.core").defaults

_M.DEFAULTS = {
    ttl = 10000,
    wait = 10000,
    retry_delay = 50,
    retry_jitter = 50,
    drift_factor = 0.01,
    mode = "auto",
    connect_timeout = core_defaults.connect_timeout,
    timeout = core_defaults.timeout,
    server_backoff = 1000,
    keepalive_timeout = core_defaults.keepalive_timeout,
    pool_size = core_defaults.pool_size,
    fence = true,
    replicas = 0,
    replica_timeout = core_defaults.replica_timeout,
    aof = false,
    legacy_value = "token",
}

local function bad(fname, name, expected, value)
    local got = type(value) == "string" and format("%q", value) or tostring(value)
    if type(value) == "table" or type(value) == "function" then got = type(value) end
    error(format("bad option '%s' to '%s' (%s expected, got %s)", name, fname, expected, got), 5)
end

local checks = {}

function checks.positive_integer(fname, name, v)
    if type(v) ~= "number" or v < 1 or v ~= floor(v) or v > 2 ^ 53 then
        bad(fname, name, "positive integer (ms)", v)
    end
    return v
end

function checks.positive_number(fname, name, v)
    if type(v) ~= "number" or v ~= v or v <= 0 or v == math.huge then
        bad(fname, name, "number > 0 (ms)", v)
    end
    return v
end

function checks.non_negative(fname, name, v)
    if type(v) ~= "number" or v ~= v or v < 0 or v == math.huge then
        bad(fname, name, "number >= 0 (ms)", v)
    end
    return v
end

function checks.fraction(fname, name, v)
    if type(v) ~= "number" or not (v >= 0 and v < 1) then
        bad(fname, name, "number in [0, 1)", v)
    end
    return v
end

function checks.timeout(fname, name, v)
    if type(v) ~= "number" or v < 1 or v ~= floor(v) or v > 86400000 then
        bad(fname, name, "integer from 1 to 86400000 (ms)", v)
    end
    return v
end

function checks.replicas(fname, name, v)
    if type(v) ~= "number" or v < 0 or v ~= floor(v) or v > 1000000 then
        bad(fname, name, "integer from 0 to 1000000", v)
    end
    return v
end

function checks.mode(fname, name, v)
    if v ~= "auto" and v ~= "script" and v ~= "legacy" then
        bad(fname, name, "\"auto\", \"script\" or \"legacy\"", v)
    end
    return v
end

function checks.boolean(fname, name, v)
    if type(v) ~= "boolean" then bad(fname, name, "boolean", v) end
    return v
end

function checks.callable(fname, name, v)
    local mt = type(v) == "table" and getmetatable(v)
    if type(v) ~= "function" and not (mt and mt.__call) then bad(fname, name, "function", v) end
    return v
end

function checks.any(_, _, v) return v end

function checks.legacy_value(fname, name, v)
    if v ~= "token" and v ~= "plain" then bad(fname, name, "\"token\" or \"plain\"", v) end
    return v
end

-- sync_fence was Redlock's opt-in to fences that never go backwards; they
-- always do now. false would make lock.fence unsafe: fence = false is the
-- way to go without fences.
function checks.sync_fence(fname, name, v)
    if v ~= true then
        bad(fname, name, "true (Redlock fences are always synced; fence = false turns fences off)", v)
    end
    return v
end

_M.checks = checks

--- Options a call (acquire, try_acquire, with_lock) may override, and how to
-- check each. Other modules add theirs (renew, reentrant, ...) here.
_M.CALL = {
    ttl = checks.positive_integer,
    wait = checks.non_negative,
    retry_delay = checks.positive_number,
    retry_jitter = checks.non_negative,
    -- false: no fence (lock.fence is nil, no counter is touched)
    fence = checks.boolean,
    -- replica acknowledgement (redlock.replicas): WAIT replicas
    -- replica_timeout with the lock's write; aof: WAITAOF 1 replicas
    -- replica_timeout (Redis 7.2+)
    replicas = checks.replicas,
    replica_timeout = checks.timeout,
    aof = checks.boolean,
}

--- Options only redlock.new takes (servers is parsed apart).
_M.CLIENT = {
    servers = checks.any, -- parsed by redlock.addresses
    drift_factor = checks.fraction,
    mode = checks.mode,
    connect_timeout = checks.timeout,
    timeout = checks.timeout,
    server_timeout = checks.timeout, -- Redlock; default derived from ttl (redlock.quorum)
    server_backoff = checks.non_negative, -- Redlock
    sync_fence = checks.sync_fence, -- Redlock; accepted for compatibility
    -- legacy mode's values: "token" ("<expiry ms>:<token>") or "plain" (the
    -- expiry alone, for fleets where the old timestamp recipe still runs)
    legacy_value = checks.legacy_value,
    tls = function(fname, name, v)
        return addresses.check_tls(v, format("option '%s' to '%s'", name, fname), 6)
    end,
    -- nginx cosockets only (redlock.nginx.cosocket): idle time and size of the
    -- per-worker keepalive pool of each server
    keepalive_timeout = checks.timeout,
    pool_size = checks.positive_integer,
}

--- Checks a table of options against one or more schemas and returns a new
-- table: base's values overridden by the checked ones. Unknown names raise.
function _M.check(fname, opts, base, schema, schema2)
    if opts ~= nil and type(opts) ~= "table" then
        error(format("bad argument 'opts' to '%s' (table expected, got %s)", fname, type(opts)), 3)
    end
    local out = {}
    for k, v in pairs(base) do out[k] = v end
    if opts then
        for k, v in pairs(opts) do
            local check = schema[k] or (schema2 and schema2[k])
            if not check then
                error(format("bad option '%s' to '%s' (unknown option)", tostring(k), fname), 3)
            end
            out[k] = check(fname, k, v)
        end
    end
    return out
end

return _M
