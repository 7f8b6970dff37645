--- Small helpers shared by the redlock modules: key display, hash tags,
-- unpacking and jitter. Internal.
local core = require "redlock.core"

local byte, format, find, sub = string.byte, string.format, string.find, string.sub
local concat, type = table.concat, type
local random_bytes, keyslot, slot_tag = core.random_bytes, core.keyslot, core.slot_tag

local _M = {}

-- The last key shown, and how: try_acquire on a held key builds a message
-- with it on every refusal.
local shown_key, shown_as = nil, nil

--- A key as it appears in messages: quoted, non-printable bytes as \xHH,
-- long keys cut, so a binary key never garbles a log line.
function _M.show_key(key)
    if key == shown_key then return shown_as end
    if type(key) == "table" then -- a group lock's keys
        local parts = {}
        for i = 1, #key do parts[i] = _M.show_key(key[i]) end
        return concat(parts, ", ")
    end
    local shown
    -- the usual key is printable and short: no gsub
    if #key <= 80 and not find(key, "[^%w%p ]") then
        shown = "'" .. key .. "'"
    else
        shown = key:gsub("[^%w%p ]", function(c) return format("\\x%02x", byte(c)) end)
        if #shown > 80 then shown = sub(shown, 1, 77) .. "..." end
        shown = "'" .. shown .. "'"
    end
    shown_key, shown_as = key, shown
    return shown
end

-- What the keys of a lock's companions (waiters set, wake-up list, ...)
-- start with: the key itself when it has a hash tag (only the first '{' and
-- the first '}' after it count, and not when empty), else the key in braces,
-- which hashes the same bytes. A tag-less key that holds a '}' cannot be
-- wrapped ("{a}b}" would hash "a"): it gets a tag chosen to land in its slot
-- in front, "{tag}" .. key.
local function companion_base(key)
    local open = find(key, "{", 1, true)
    if open then
        local close = find(key, "}", open + 1, true)
        if close and close > open + 1 then return key end
    end
    if find(key, "}", 1, true) then return "{" .. slot_tag(keyslot(key)) .. "}" .. key end
    return "{" .. key .. "}"
end

-- The last key asked for, and per suffix the last companion made: acquire
-- and release of one lock (and every attempt of a waiter) ask for the same
-- key several times, and a new key allocates nothing but its companions.
local last_key, last_base = nil, nil
local made_for, made = {}, {}

--- The key of a lock's companion (waiters set, wake-up list): it hashes to
-- the same Cluster slot as the lock key, so that one script may touch both
-- (see companion_base), and it is distinct for every lock key.
function _M.companion_key(key, suffix)
    if made_for[suffix] == key then return made[suffix] end
    if key ~= last_key then last_key, last_base = key, companion_base(key) end
    local k = last_base .. suffix
    made_for[suffix], made[suffix] = key, k
    return k
end

--- The fence counter that a lock on `key` takes its fence from: one per
-- server, for every key (the acquire script, scripts/acquire.lua); with
-- per_slot (a Cluster, where a script's keys must share a slot), one per
-- hash slot: "{tag}redlock:fences", the tag chosen to land in key's slot
-- (csrc/protocol/slot.c), so that a key's fences come from one counter wherever
-- its slot moves. A stream on Redis 5.0 and later, a string before. (Not
-- "redlock:fence", the string counter of versions before the stream:
-- during a rolling upgrade their INCR would meet the stream.)
_M.FENCE_COUNTER = "redlock:fences"
local slot_counters = {}
function _M.fence_counter(key, per_slot)
    if not per_slot then return _M.FENCE_COUNTER end
    local slot = keyslot(key)
    local k = slot_counters[slot]
    if not k then
        k = "{" .. slot_tag(slot) .. "}" .. _M.FENCE_COUNTER
        slot_counters[slot] = k
    end
    return k
end

-- The last two asked for: a client mostly uses one ttl and one wait.
local ms_a, str_a, ms_b, str_b = nil, nil, nil, nil

--- An integer number of ms as Redis reads it.
function _M.ms_string(ms)
    if ms == ms_a then return str_a end
    if ms ~= ms_b then ms_b, str_b = ms, format("%d", ms) end
    -- the one just used moves first, so the other one is replaced next
    ms_a, str_a, ms_b, str_b = ms_b, str_b, ms_a, str_a
    return str_a
end

--- unpack of a table with its length in field n (trailing nils kept), on
-- every Lua version.
local unpack = table.unpack or unpack -- luacheck: ignore 143
function _M.unpack(t) return unpack(t, 1, t.n) end

--- nil, "server: <name>: unexpected reply to <what> (<r>)", "server": a
-- reply no script or command of ours gives (a proxy's, another version's).
function _M.unexpected(server, what, r)
    return nil, format("server: %s: unexpected reply to %s (%s)", server.name, what, tostring(r)), "server"
end

--- The misuse answer ({2, M} from a lock script) as nil, message,
-- "misuse". m: the limit of the semaphore found (0: no semaphore); limit:
-- the one asked for, or nil when asked: what was asked ("a single lock",
-- ...).
function _M.misuse(key, m, limit, server, asked)
    local what
    if m == 0 and limit then
        what = "is not a semaphore (a single lock, readers, a group's key or another value holds it)"
    elseif m == 0 then
        what = "holds a value of another kind than this library's locks"
    elseif limit then
        what = format("is held as a semaphore of limit %d, not %d", m, limit)
    else
        what = format("is held as a semaphore (limit %d), not as %s", m, asked or "a single lock")
    end
    local shown = key and _M.show_key(key) or "the key"
    return nil, format("misuse: %s %s on %s", shown, what, server.name), "misuse"
end

--- A random delay in [0, ms), from the OS source: math.random would need a
-- seed, and seeding it would change the host application's sequence.
function _M.jitter(ms)
    if ms <= 0 then return 0 end
    local b1, b2, b3 = byte(random_bytes(3), 1, 3)
    return ms * ((b1 * 65536 + b2 * 256 + b3) / 16777216)
end

--- The pause before another attempt (an acquire's, a Redlock release's):
-- o.retry_delay plus a random o.retry_jitter ms, at most bound (if given).
function _M.pause(o, bound)
    local d = o.retry_delay + _M.jitter(o.retry_jitter)
    if bound and d > bound then return bound end
    return d
end

return _M
