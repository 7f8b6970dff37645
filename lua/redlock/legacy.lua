--- Lock operations on one server without scripting: the SETNX/GETSET
-- timestamp recipe, for servers before Redis 2.6.12 or with scripting
-- disabled. Same interface as redlock.scripted. Internal.
--
-- The value is "<expiry as unix ms>:<token>", the expiry read from this
-- host's wall clock (so legacy locks depend on the clients' clocks agreeing).
-- Every write also sets the server's own expiry (PEXPIRE, or EXPIRE rounded
-- up before 2.6) as a safety net, so that nothing is held forever.
--
-- Where the server has WATCH (2.2+), every step is check-then-act under
-- WATCH/MULTI/EXEC: the GET decides, and the EXEC writes only if nobody
-- touched the key since (a nil EXEC makes us look again). So of several
-- contenders for an expired lock exactly one wins, and a loser never
-- overwrites the winner. Creation and takeover set the value, its expiry and
-- the fence in one EXEC: there is no moment without a server ttl.
--
-- Without WATCH (before 2.2, or WATCH renamed) the bare recipe runs:
-- SETNX, else GET and, if expired, GETSET; a loser puts back the value its
-- GETSET displaced. Weaker, see doc/legacy.md.
local core = require "redlock.core"
local scripted = require "redlock.scripted"
local util = require "redlock.util"

local time, null, fence_of = core.time, core.null, core.fence_of
local fence_key = scripted.fence_key -- the server's counter (redlock.util)
local unpack = util.unpack
local type, tonumber, select = type, tonumber, select
local format, match, find, sub = string.format, string.match, string.find, string.sub
local floor, ceil, max = math.floor, math.ceil, math.max

local _M = { name = "legacy" }

-- How many times one operation looks again after the key changed under it.
local MAX_TRIES = 8

--- "x.y.z" in an INFO reply as x*10000 + y*100 + z (2.6.12 -> 20612), or nil.
function _M.parse_version(info)
    local a, b, c = match(info, "redis_version:(%d+)%.(%d+)%.(%d+)")
    if not a then return nil end
    return tonumber(a) * 10000 + tonumber(b) * 100 + tonumber(c)
end

--- What this server can do, asked once (INFO) and kept on the server:
-- { version = n|nil, watch = bool, pexpire = bool, pttl = bool, time =
-- bool, policy = maxmemory-policy|nil, maxmemory = bytes|nil (3.2 and
-- later; redlock.eviction) }.
-- A server that refuses INFO is assumed modern; a command that turns out to
-- be unknown is dropped from the list then. A connection error is not
-- kept: the next call asks again. (INFO's default sections, which every
-- version takes: the version is in "server", the policy in "memory".)
function _M.caps(server)
    local caps = server.caps
    if caps then return caps end
    local info, err, code = server:call("INFO")
    if info == nil and code ~= "server" then return nil, err, code end
    if type(info) ~= "string" then info = "" end
    local v = _M.parse_version(info)
    caps = {
        policy = match(info, "\nmaxmemory_policy:([%w%-]+)"),
        maxmemory = tonumber(match(info, "\nmaxmemory:(%d+)")),
        version = v,
        watch = not v or v >= 20200,
        pexpire = not v or v >= 20600,
        pttl = not v or v >= 20600,
        time = not v or v >= 20600, -- fences seeded from the server's clock
        streams = not v or v >= 50000, -- the fence counter is a stream (XADD)
    }
    server.caps = caps
    return caps
end

local function unknown(err, code)
    return code == "server" and find(err, "unknown command", 1, true) ~= nil
end

--- Parses a stored value: expiry (unix ms), token; nil for anything not
-- written by a legacy lock (another client's plain token), which is never
-- taken for expired.
-- A stored value as a timestamp lock: its expiry in Unix ms, and the token
-- when it is one of ours ("<ms>:<32 hex>"); nil when it is no timestamp
-- lock. A decimal integer, alone or followed by ':' and anything, is one:
-- what the SETNX/GETSET recipe writes (a plain expiry, as in seed 004's
-- `System.currentTimeMillis() + timeout + 1`, or in Unix seconds, as in the
-- Redis documentation's SETNX example) and what other clients write with a
-- suffix. Its unit follows from its size: below 10^11 it is seconds (10^11
-- s is in the year 5138), else ms (10^11 ms was in 1973). Anything else (a
-- script-mode token, a word) is no timestamp: held until its server ttl.
local function parse(v)
    if type(v) ~= "string" then return nil end
    local digits, rest = match(v, "^(%d+)(.*)$")
    -- 16 digits of ms reach the year 318857; more is no timestamp (a
    -- script-mode token of decimal digits only, 32 of them)
    if not digits or #digits > 16 or (rest ~= "" and sub(rest, 1, 1) ~= ":") then return nil end
    local exp = tonumber(digits)
    if exp < 1e11 then exp = exp * 1000 end
    local tok = match(rest, "^:(%x+)$")
    if tok and (#tok ~= 32 or find(tok, "%u")) then tok = nil end
    return exp, tok
end
_M.parse = parse

-- legacy_value = "plain" (mixed fleets, see docs/legacy.md): the value is the
-- expiry alone, which the old recipe reads; ownership is then "the key
-- holds the exact value this client last wrote for the lock"
-- (server.written, by token, recorded once the write is known to have
-- succeeded), since the value carries no token. Values of successive
-- holders differ: a takeover writes now + ttl, past the expired value.
local function value_of(server, exp, token)
    if server.plain then return format("%d", exp) end
    return format("%d:%s", exp, token)
end

-- Whether the stored value v is the lock of token.
local function mine(server, token, v)
    if server.plain then
        local w = server.written
        return w ~= nil and v ~= nil and w[token] == v
    end
    return select(2, parse(v)) == token
end

-- Records the value just written (plain values only).
local function wrote(server, token, v)
    if not server.plain then return end
    local w = server.written
    if w == nil then
        w = {}
        server.written = w
    end
    w[token] = v
end

local function wall() return floor(time()) end

local function expire_cmd(caps, key, ms)
    if caps.pexpire then return { "PEXPIRE", key, format("%d", ms) } end
    return { "EXPIRE", key, format("%d", ceil(ms / 1000)) }
end

local unexpected = util.unexpected

-- Commands after the first of a sequence never go through Server:call's
-- retry on a fresh connection, nor to a new one at all (conn:command_kept:
-- a lost connection, a Sentinel switch): the server forgets WATCH and
-- MULTI with the old one, and an unguarded write is what this module must
-- never send. Each operation is one sequence (server.sequence: inside
-- nginx, on the cosocket its first command took, as hiredis' one
-- connection does).
local function cmd(server, ...)
    local r, err, code = server.conn:command_kept(...)
    return r, err, code
end

local function unwatch(server)
    if server.conn:connected() then server.conn:command_kept("UNWATCH") end
end

-- The wait for another holder whose value is not ours to read: the
-- server's ttl (-1: none).
local function foreign_pttl(server, caps, key)
    local r, err, code
    if caps.pttl then
        r, err, code = cmd(server, "PTTL", key)
        if r == nil and unknown(err, code) then caps.pttl = false end
    end
    if not caps.pttl then
        r, err, code = cmd(server, "TTL", key)
        if type(r) == "number" and r > 0 then r = r * 1000 end
    end
    if r == nil then return nil, err, code end
    if type(r) ~= "number" then return unexpected(server, "PTTL", r) end
    if r < -1 then r = 0 end -- gone meanwhile: look again soon
    return false, r
end

-- The held-by-another answer for a parsed value.
local function held(server, caps, key, exp, now)
    if exp then return false, max(0, exp - now) end
    return foreign_pttl(server, caps, key)
end

---------------------------------------------------------------------------
-- Without WATCH: the bare recipe.

-- After our GETSET displaced `old`, a live lock of another holder: put it
-- back, with a server ttl (its own expiry, or ours for a foreign value).
-- Someone acting between the two GETSETs can still lose a value here.
local function put_back(server, caps, key, old, ours, ttl)
    local back = cmd(server, "GETSET", key, old)
    if back == ours then
        local exp = parse(old)
        cmd(server, unpack(expire_cmd(caps, key, exp and max(1, exp - wall()) or ttl)))
    end
end

-- WATCH key, GET key. The value (or null), or nil, err, code.
local function watch_get(server, key)
    local r, err, code = server:call("WATCH", key)
    if r == nil then return nil, err, code end
    r, err, code = cmd(server, "GET", key)
    if r == nil then unwatch(server) end
    return r, err, code
end

-- MULTI, cmds, EXEC. The EXEC reply: a list, or null when a watched key
-- changed (nothing was written); nil, err, code, name of the command that
-- failed (the transaction is discarded, the watch dropped), and true when
-- that failure is in EXEC's answer (the commands before it ran).
local function transact(server, cmds)
    local conn = server.conn
    local r, err, code = conn:command_kept("MULTI")
    if r == nil then
        unwatch(server)
        return nil, err, code, "MULTI"
    end
    for i = 1, #cmds do
        r, err, code = conn:command_kept(unpack(cmds[i]))
        if r == nil then
            if conn:connected() then conn:command_kept("DISCARD") end
            return nil, err, code, cmds[i][1]
        end
    end
    r, err, code = conn:command_kept("EXEC")
    if r == nil then
        if conn:connected() then conn:command_kept("DISCARD") end
        return nil, err, code, "EXEC"
    end
    if r == null then return r end
    if type(r) ~= "table" then return unexpected(server, "EXEC", r) end
    for i = 1, #cmds do
        local e = r[i]
        if type(e) == "table" and e.err then
            return nil, format("server: %s: %s", server.name, e.err), "server", cmds[i][1], true
        end
    end
    return r
end

-- The fences' clock starts on 2026-01-01 UTC (the acquire script's).
local FENCE_EPOCH_MS = 1767225600000

-- The fence from INCR's answer f and TIME's {seconds, microseconds} (nil
-- where the server has no TIME, before 2.6): at least the server's clock in
-- ms since 2026-01-01, times 100 (the acquire script's rule,
-- scripts/parts/fence.lua), so that a counter lost with a restart or a failover does
-- not make fences go back (as long as the clock does not). Below that,
-- INCRBY of the difference: it never lowers the counter whatever runs in
-- between; one more round trip, at most once a millisecond per server.
-- true, fence | nil, err, code.
local function fence_seeded(server, key, f, t)
    f = tonumber(f)
    if not f then return unexpected(server, "INCR", f) end
    local sec, usec = type(t) == "table" and tonumber(t[1]), type(t) == "table" and tonumber(t[2])
    if not (sec and usec) then return true, f end
    local base = (sec * 1000 + floor(usec / 1000) - FENCE_EPOCH_MS) * 100
    if f >= base then return true, f end
    local r, err, code = cmd(server, "INCRBY", fence_key(key, server.slot_fences), format("%.0f", base - f))
    if r == nil then return nil, err, code end
    return true, tonumber(r)
end

-- The next fence of a counter stream above `above` (0 at least: fences
-- are 1 or more), the way the acquire script takes one (scripts/parts/fence.lua):
-- XADD's ID, or when that gives no fence (a seq over 99, an ID before the
-- epoch's second) or not one above `above`, the ID of the next fence by an
-- explicit XADD (refused when another client's came first: then again).
-- id: an XADD's answer already in hand, or nil. true, fence | nil, err, code.
local function stream_fence(server, counter, above, id)
    for _ = 1, MAX_TRIES do
        if not id then
            local err, code
            id, err, code = cmd(server, "XADD", counter, "MAXLEN", "0", "*", "f", "1")
            if id == nil then return nil, err, code end
        end
        local f = fence_of(id)
        if f and f > above then return true, f end
        local ms = tonumber(match(id, "^(%d+)%-"))
        if not ms then return unexpected(server, "XADD", id) end
        f = max(above + 1, f or (ms + 1 - FENCE_EPOCH_MS) * 100)
        local seq = f % 100
        local r, err, code = cmd(server, "XADD", counter, "MAXLEN", "0",
            format("%.0f-%d", (f - seq) / 100 + FENCE_EPOCH_MS, seq), "f", "1")
        if r ~= nil then return true, f end
        if not find(err, "smaller", 1, true) then return nil, err, code end
        id = nil
    end
    return nil, format("server: %s: the fence counter keeps changing", server.name), "server"
end

-- A string counter (from before Redis 5) on a server with streams: replaced
-- by the stream, whose first ID is the fence above the string's value and
-- at least the server's clock (TIME), as the acquire script does: WATCH,
-- GET, TIME, then DEL and the XADD of that ID in one MULTI/EXEC, so that
-- nobody takes a fence from the stream before it is above the old value,
-- and a conversion by another client (a script's) is never deleted (its
-- write makes our EXEC nil: look again). Without WATCH (renamed away) the
-- same steps, not atomic. true, fence | nil, err, code.
local function convert(server, caps, counter)
    for _ = 1, MAX_TRIES do
        local c, err, code
        if caps.watch then c, err, code = watch_get(server, counter)
        else c, err, code = cmd(server, "GET", counter) end
        if c == nil then
            -- a stream already: someone converted it, above the old value
            if code == "server" and find(err, "WRONGTYPE", 1, true) then
                return stream_fence(server, counter, 0)
            end
            return nil, err, code
        end
        local above = c == null and 0 or tonumber(match(c, "^%-?%d+$") and c)
        if not above then
            if caps.watch then unwatch(server) end
            return nil, format("server: %s: the fence counter %s holds %q, not an integer",
                server.name, counter, sub(c, 1, 40)), "server"
        end
        local t
        t, err, code = cmd(server, "TIME")
        if t == nil then
            if caps.watch then unwatch(server) end
            return nil, err, code
        end
        if type(t) ~= "table" or not tonumber(t[1]) then return unexpected(server, "TIME", t) end
        local ms = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
        local f = max(above + 1, (ms - FENCE_EPOCH_MS) * 100, 1)
        local seq = f % 100
        local steps = { { "DEL", counter }, { "XADD", counter, "MAXLEN", "0",
            format("%.0f-%d", (f - seq) / 100 + FENCE_EPOCH_MS, seq), "f", "1" } }
        if caps.watch then
            local r
            r, err, code = transact(server, steps)
            if r == nil then return nil, err, code end
            if r ~= null then return true, f end
        else
            for i = 1, 2 do
                local r
                r, err, code = cmd(server, unpack(steps[i]))
                if r == nil then
                    -- another client's stream came in between: above ours
                    if find(err, "smaller", 1, true) then return stream_fence(server, counter, above) end
                    return nil, err, code
                end
            end
            return true, f
        end
    end
    return nil, format("server: %s: the fence counter keeps changing", server.name), "server"
end

-- The command that takes a fence from the server's counter.
local function fence_cmd(server, caps, key)
    local counter = fence_key(key, server.slot_fences)
    if caps.streams then return { "XADD", counter, "MAXLEN", "0", "*", "f", "1" } end
    return { "INCR", counter }
end

-- The fence from fence_cmd's answer r (and TIME's t after an INCR).
local function fence_from(server, key, r, t)
    if type(r) == "string" then
        local f = fence_of(r)
        if f then return true, f end
        return stream_fence(server, fence_key(key, server.slot_fences), 0, r)
    end
    return fence_seeded(server, key, r, t)
end

-- Sets the safety net on a key we just wrote, then takes a fence (unless
-- unfenced): XADD to the server's counter stream, or without streams INCR
-- of its counter, then TIME, as fence_seeded says.
local function finish(server, caps, key, ttl, unfenced)
    local e = expire_cmd(caps, key, ttl)
    local r, err, code = cmd(server, unpack(e))
    if r == nil and e[1] == "PEXPIRE" and unknown(err, code) then
        caps.pexpire = false
        r, err, code = cmd(server, unpack(expire_cmd(caps, key, ttl)))
    end
    if r == nil then return nil, err, code end
    if unfenced then return true, 0 end
    local f = fence_cmd(server, caps, key)
    r, err, code = cmd(server, unpack(f))
    if r == nil and f[1] == "XADD" then
        if unknown(err, code) then
            caps.streams = false
            f = fence_cmd(server, caps, key)
            r, err, code = cmd(server, unpack(f))
        elseif code == "server" and find(err, "WRONGTYPE", 1, true) then
            return convert(server, caps, f[2])
        end
    end
    if r == nil then return nil, err, code end
    local t
    if f[1] == "INCR" and caps.time then
        t, err, code = cmd(server, "TIME")
        if t == nil and unknown(err, code) then caps.time = false end
    end
    return fence_from(server, key, r, t)
end

-- An acquire that wrote the key and then failed (no fence to go with it,
-- no server ttl set): the key given back by a compare-and-delete (a
-- release, the legacy way; best effort, else its ttl ends it), and the
-- failure returned. value: what we wrote (recorded for plain values).
local function given_back(server, key, token, value, err, code)
    wrote(server, token, value)
    _M.release(server, key, token)
    return nil, err, code
end

-- finish, with the key given back when it fails.
local function finished(server, caps, key, token, value, ttl, unfenced)
    local ok, f, code = finish(server, caps, key, ttl, unfenced)
    if ok == nil then return given_back(server, key, token, value, f, code) end
    return ok, f
end

local bare = {}

function bare.acquire(server, caps, key, token, ttl, unfenced)
    for i = 1, MAX_TRIES do
        local now = wall()
        local value = value_of(server, now + ttl, token)
        local r, err, code
        if i == 1 then r, err, code = server:call("SETNX", key, value)
        else r, err, code = cmd(server, "SETNX", key, value) end
        if r == nil then return nil, err, code end
        if r == 1 then
            wrote(server, token, value)
            return finished(server, caps, key, token, value, ttl, unfenced)
        end
        local cur
        cur, err, code = cmd(server, "GET", key)
        if cur == nil then return nil, err, code end
        if cur ~= null then
            local exp = parse(cur)
            if mine(server, token, cur) then
                -- ours already (a retry after a lost reply): refresh it,
                -- unless it was taken over since the GET
                local old
                old, err, code = cmd(server, "GETSET", key, value)
                if old == nil then return nil, err, code end
                if old == null or mine(server, token, old) then
                    wrote(server, token, value)
                    return finished(server, caps, key, token, value, ttl, unfenced)
                end
                put_back(server, caps, key, old, value, ttl)
                return held(server, caps, key, (parse(old)), now)
            end
            if not exp or exp >= now then return held(server, caps, key, exp, now) end
            local old
            old, err, code = cmd(server, "GETSET", key, value)
            if old == nil then return nil, err, code end
            local oexp = parse(old)
            -- ours only if what we displaced was still expired (or gone)
            if old == null or (oexp and oexp < now) then
                wrote(server, token, value)
                return finished(server, caps, key, token, value, ttl, unfenced)
            end
            put_back(server, caps, key, old, value, ttl)
            if oexp then return false, max(0, oexp - now) end
            return false, 0
        end
        -- deleted between SETNX and GET: try again
    end
    return false, 0
end

function bare.release(server, _, key, token)
    local cur, err, code = server:call("GET", key)
    if cur == nil then return nil, err, code end
    local exp = parse(cur)
    -- seed 004: past our own expiry it may be someone else's by now
    if not mine(server, token, cur) or exp <= wall() then return false end
    local r
    r, err, code = cmd(server, "DEL", key)
    if r == nil then return nil, err, code end
    return r == 1
end

function bare.extend(server, caps, key, token, ttl)
    local cur, err, code = server:call("GET", key)
    if cur == nil then return nil, err, code end
    local exp = parse(cur)
    local now = wall()
    if not mine(server, token, cur) or exp <= now then return false end
    local value = value_of(server, now + ttl, token)
    local old
    old, err, code = cmd(server, "GETSET", key, value)
    if old == nil then return nil, err, code end
    if old ~= cur then
        -- taken over between GET and GETSET: that value is not ours to replace
        if old ~= null then put_back(server, caps, key, old, value, ttl) else cmd(server, "DEL", key) end
        return false
    end
    local e = expire_cmd(caps, key, ttl)
    local r
    r, err, code = cmd(server, unpack(e))
    if r == nil and e[1] == "PEXPIRE" and unknown(err, code) then
        caps.pexpire = false
        r, err, code = cmd(server, unpack(expire_cmd(caps, key, ttl)))
    end
    if r == nil then return nil, err, code end
    wrote(server, token, value)
    return true
end

---------------------------------------------------------------------------
-- With WATCH: every write is conditional on the key being as we read it.

-- A failed transaction: true if a capability turned out missing (the caller
-- looks again without it), else false.
local function lost_cap(caps, err, code, failed)
    if not unknown(err, code) then return false end
    if failed == "PEXPIRE" then caps.pexpire = false return true end
    if failed == "TIME" then caps.time = false return true end
    if failed == "XADD" then caps.streams = false return true end
    if failed == "MULTI" or failed == "EXEC" then caps.watch = false return true end
    return false
end

local guarded = {}

function guarded.acquire(server, caps, key, token, ttl, unfenced)
    for _ = 1, MAX_TRIES do
        local cur, err, code = watch_get(server, key)
        if cur == nil then
            if unknown(err, code) then
                caps.watch = false
                return bare.acquire(server, caps, key, token, ttl, unfenced)
            end
            return nil, err, code
        end
        local now = wall()
        local value = value_of(server, now + ttl, token)
        local exp = parse(cur)
        local first
        if cur == null then
            first = { "SETNX", key, value }
        elseif mine(server, token, cur) then
            -- ours already (a retry after a lost reply): refresh it (with a
            -- new fence: the one of the lost reply was never seen)
            first = { "SET", key, value }
        elseif exp and exp < now then
            first = { "GETSET", key, value }
        else
            unwatch(server)
            return held(server, caps, key, exp, now)
        end
        local steps = { first, expire_cmd(caps, key, ttl) }
        if not unfenced then
            steps[3] = fence_cmd(server, caps, key)
            if caps.time and not caps.streams then steps[4] = { "TIME" } end
        end
        local r, failed, ran
        r, err, code, failed, ran = transact(server, steps)
        if r == nil and ran and failed == "XADD" and find(err, "WRONGTYPE", 1, true) then
            -- a string counter (from before Redis 5): the stream replaces
            -- it; the key now holds our token (WATCH: our write was the one
            -- the GET decided), which we look at again
            wrote(server, token, value)
            local ok
            ok, err, code = convert(server, caps, steps[3][2])
            if ok == nil then return given_back(server, key, token, value, err, code) end
        elseif r == nil then
            -- (a command after the key's write failed in EXEC, or EXEC's
            -- answer was lost: the key may hold our token)
            if (ran and failed ~= first[1]) or (failed == "EXEC" and code == "connection") then
                return given_back(server, key, token, value, err, code)
            end
            if not lost_cap(caps, err, code, failed) then return nil, err, code end
            if not caps.watch then return bare.acquire(server, caps, key, token, ttl, unfenced) end
        elseif r ~= null then
            local old = r[1]
            if first[1] == "SET" or (first[1] == "SETNX" and old == 1) then
                wrote(server, token, value)
                if unfenced then return true, 0 end
                local ok, f, c = fence_from(server, key, r[3], r[4])
                if ok == nil then return given_back(server, key, token, value, f, c) end
                return ok, f
            end
            if first[1] == "GETSET" then
                -- WATCH makes `old` the expired value we read; still, own
                -- the lock only if what we displaced was expired (or gone)
                local oexp = parse(old)
                if old == null or (oexp and oexp < now) then
                    wrote(server, token, value)
                    if unfenced then return true, 0 end
                    local ok, f, c = fence_from(server, key, r[3], r[4])
                    if ok == nil then return given_back(server, key, token, value, f, c) end
                    return ok, f
                end
                put_back(server, caps, key, old, value, ttl)
                return held(server, caps, key, oexp, now)
            end
            -- a SETNX that found the key: WATCH should have stopped it; look again
        end
        -- nil EXEC: the key changed since our GET; look again
    end
    return false, 0 -- it keeps changing: someone else is busy with it
end

-- The shared shape of release and extend: WATCH, GET, check it is ours and
-- not past our own expiry, then cmds in MULTI/EXEC; look again on nil EXEC.
local function owned_write(server, caps, key, token, what, cmds_for, bare_op, ttl)
    for _ = 1, MAX_TRIES do
        local cur, err, code = watch_get(server, key)
        if cur == nil then
            if unknown(err, code) then
                caps.watch = false
                return bare_op(server, caps, key, token, ttl)
            end
            return nil, err, code
        end
        local exp = parse(cur)
        local now = wall()
        -- seed 004: past our own expiry the lock is not ours to touch
        if not mine(server, token, cur) or exp <= now then
            unwatch(server)
            return false
        end
        local r, failed
        local cmds, written = cmds_for(now)
        r, err, code, failed = transact(server, cmds)
        if r == nil then
            if not lost_cap(caps, err, code, failed) then return nil, err, code end
            if not caps.watch then return bare_op(server, caps, key, token, ttl) end
        elseif r ~= null then
            local done = r[1] == 1 or r[1] == "OK"
            if done and written then wrote(server, token, written) end
            return done
        end
        -- nil EXEC: someone touched the key since our GET; check again
    end
    return nil, format("server: %s: %s kept changing while %s (%d tries)",
        server.name, util.show_key(key), what, MAX_TRIES), "server"
end

function guarded.release(server, caps, key, token)
    return owned_write(server, caps, key, token, "releasing",
        function() return { { "DEL", key } } end, bare.release)
end

function guarded.extend(server, caps, key, token, ttl)
    return owned_write(server, caps, key, token, "extending", function(now)
        local value = value_of(server, now + ttl, token)
        return { { "SET", key, value }, expire_cmd(caps, key, ttl) }, value
    end, bare.extend, ttl)
end

---------------------------------------------------------------------------
-- The ops interface (see redlock.scripted).

-- Replica acknowledgement (opts.replicas, aof) rides on the scripts: the
-- WAIT goes in the same write as the script. Legacy mode's several
-- commands have no such write: it says so rather than lock unacknowledged.
local function no_replicas(server)
    return nil, format("server: %s: replicas and aof need script mode (legacy mode cannot wait"
        .. " for replicas)", server.name), "server"
end

-- f(server, ...) as one sequence (see cmd).
local function sequence(server, f, ...)
    local seq = server.sequence
    if seq then return seq(server, f, ...) end
    return f(server, ...)
end

local function op(name)
    local function run(server, key, token, ttl)
        local caps, err, code = _M.caps(server)
        if not caps then return nil, err, code end
        local impl = caps.watch and guarded or bare
        local ok, v, c = impl[name](server, caps, key, token, ttl)
        -- a plain value no longer ours (or released) is forgotten
        local w = server.written
        if w and (ok == false or (name == "release" and ok ~= nil)) then w[token] = nil end
        return ok, v, c
    end
    return function(server, key, token, ttl, rep)
        if rep and name == "extend" then return no_replicas(server) end
        return sequence(server, run, key, token, ttl)
    end
end

local function acquire(server, key, token, ttl, unfenced)
    local caps, err, code = _M.caps(server)
    if not caps then return nil, err, code end
    local impl = caps.watch and guarded or bare
    return impl.acquire(server, caps, key, token, ttl, unfenced)
end
--- true, fence | false, pttl (another holder; -1: no expiry) | nil, err, code
-- (waiting and again: notified waiting's, which legacy mode does not do;
-- unfenced: fence = false, no counter touched and fence 0.)
-- rep: replica acknowledgement, which legacy mode refuses.
function _M.acquire(server, key, token, ttl, _, _, unfenced, rep)
    if rep then return no_replicas(server) end
    return sequence(server, acquire, key, token, ttl, unfenced)
end

local function raise_fence(server, counter, fence)
    local caps = server.caps
    if not caps or caps.streams then
        local seq = fence % 100
        local r, err, code = server:call("XADD", counter, "MAXLEN", "0",
            format("%.0f-%d", (fence - seq) / 100 + FENCE_EPOCH_MS, seq), "f", "1")
        if r ~= nil or (code == "server" and find(err, "smaller", 1, true)) then return true, fence end
        if unknown(err, code) then
            if caps then caps.streams = false end
        elseif not (code == "server" and find(err, "WRONGTYPE", 1, true)) then
            return nil, err, code
        end
    end
    local c, err, code = server:call("GET", counter)
    if c == nil then return nil, err, code end
    c = tonumber(c) or 0
    if c >= fence then return true, c end
    local r
    r, err, code = server:call("INCRBY", counter, format("%.0f", fence - c))
    if r == nil then return nil, err, code end
    return true, tonumber(r)
end
--- Raises the server's fence counter to at least `fence` (Redlock writes a
-- lock's fence back to the servers that granted it): the stream's last ID
-- to the fence's (an explicit XADD, refused when it is already higher), or
-- for a string counter GET, then INCRBY of the difference, which never
-- lowers it whatever runs in between (it may go higher). true | nil, err,
-- code.
function _M.raise_fence(server, counter, fence) return sequence(server, raise_fence, counter, fence) end

--- true | false (not ours any more, or past our expiry) | nil, err, code
_M.release = op("release")
--- true | false | nil, err, code
_M.extend = op("extend")

return _M
