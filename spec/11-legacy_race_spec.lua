-- Legacy mode across real OS processes: the takeover race for one expired
-- lock (exactly one winner per round, and the winner keeps the lock), and
-- contention with no lost update. Servers refuse scripting.
local helper = require "helper"
local core = require "redlock.core"
local redlock = require "redlock"

local format, floor = string.format, math.floor

local NOSCRIPT = {
    'rename-command EVAL ""', 'rename-command EVALSHA ""', 'rename-command SCRIPT ""',
    'rename-command FUNCTION ""', 'rename-command FCALL ""',
}

local WORKERS, ROUNDS = 4, 30

local function list(conn, k)
    local r = assert(conn:command("LRANGE", k, "0", "-1"))
    return r
end

local function num(conn, k)
    local v = conn:command("GET", k)
    return tonumber(v ~= core.null and v or 0) or 0
end

local function wait_until(pred, limit)
    local t0 = core.now()
    while not pred() do
        if core.now() - t0 > limit then return false end
        core.sleep(2)
    end
    return true
end

-- The expired value a crashed holder left, round r: redlock's own format,
-- or (foreign) the formats other clients of the recipe write, in turn:
-- plain ms, plain Unix seconds, ms with any suffix.
local function left_value(r, foreign)
    local ms = floor(core.time()) - 2000
    if not foreign or r % 4 == 0 then return format("%d:%s", ms, redlock.token()) end
    if r % 4 == 1 then return format("%d", ms) end
    if r % 4 == 2 then return format("%d", floor(ms / 1000)) end
    return format("%d:deadbeef", ms)
end

-- Runs the takeover race on `server` in `mode`, `rounds` times; returns the
-- rounds in which two or more workers sent a takeover (GETSET).
local function race(server, mode, strict, rounds, foreign)
    rounds = rounds or ROUNDS
    local data = assert(core.conn(server:spec()))
    local key = helper.key("race")
    local workers = {}
    for i = 1, WORKERS do
        workers[i] = helper.spawn("spec/workers/legacy_race.lua", server.socket, mode, key, i,
            WORKERS, rounds)
    end
    local contested = 0
    for r = 1, rounds do
        -- a lock left by a crashed holder: expired timestamp, no server ttl
        data:command("SET", key, left_value(r, foreign))
        data:command("SET", key .. ":go:" .. r, format("%d", floor(core.time()) + 30))
        data:command("SET", key .. ":round", tostring(r))
        assert.is_true(wait_until(function()
            if num(data, key .. ":tried:" .. r) < WORKERS then return false end
            return #list(data, key .. ":won:" .. r) ~= 1 or #list(data, key .. ":released:" .. r) == 1
        end, 30000), "round " .. r .. " did not finish")
        assert.same({}, list(data, key .. ":err:" .. r))
        local won = list(data, key .. ":won:" .. r)
        assert.equal(1, #won, "round " .. r .. ": winners " .. table.concat(won, ", "))
        if strict then
            -- the winner still held the key after every loser's attempt, and released it
            assert.same({ "true true nil" }, list(data, key .. ":released:" .. r), "round " .. r)
        end
        if num(data, key .. ":getsets:" .. r) >= 2 then contested = contested + 1 end
    end
    for i, w in ipairs(workers) do
        local status, out = w:wait(30000)
        assert.equal(0, status, "worker " .. i .. ": " .. tostring(out))
    end
    data:close()
    return contested
end

local function contention(server, mode, n, iterations)
    local data = assert(core.conn(server:spec()))
    local key, counter = helper.key("lock"), helper.key("counter")
    local workers = {}
    for i = 1, n do
        workers[i] = helper.spawn("spec/workers/legacy_counter.lua", server.socket, mode, key, counter,
            iterations)
    end
    for i, w in ipairs(workers) do
        local status, out = w:wait(120000)
        assert.equal(0, status, "worker " .. i .. ": " .. tostring(out))
    end
    local total = num(data, counter)
    data:close()
    return total
end

describe("legacy mode across processes", function()
    local noscript, nowatch
    setup(function()
        noscript = helper.start_server { config = NOSCRIPT }
        local cfg = {}
        for i, l in ipairs(NOSCRIPT) do cfg[i] = l end
        cfg[#cfg + 1] = 'rename-command WATCH ""'
        nowatch = helper.start_server { config = cfg }
    end)
    teardown(function() helper.stop_all() end)

    it("takeover race (WATCH/MULTI): exactly one winner per round, and it keeps the lock", function()
        local contested = race(noscript, "auto", true)
        io.stderr:write(format("\n  [legacy race, guarded] %d of %d rounds had 2+ takeover attempts\n",
            contested, ROUNDS))
        assert.is_true(contested > 0, "the workers never met at the expired lock")
    end)

    it("takeover race for the formats other clients write (plain ms, seconds, ms:x): one winner per round",
        function()
            local contested = race(noscript, "legacy", true, 20, true)
            assert.is_true(contested > 0, "the workers never met at the expired lock")
        end)

    it("takeover race (bare GETSET, no WATCH): exactly one winner per round", function()
        local contested = race(nowatch, "legacy", false)
        io.stderr:write(format("\n  [legacy race, bare] %d of %d rounds had 2+ takeover attempts\n",
            contested, ROUNDS))
        assert.is_true(contested > 0, "the workers never met at the expired lock")
    end)

    it("contention (WATCH/MULTI): lock, GET, SET+1, unlock loses no update", function()
        assert.equal(4 * 25, contention(noscript, "auto", 4, 25))
    end)

    it("mixed fleet: seed 004's recipe and redlock (legacy_value = \"plain\") lose no update", function()
        local data = assert(core.conn(noscript:spec()))
        local key, counter = helper.key("mixed"), helper.key("counter")
        local workers = {}
        for i = 1, 2 do
            -- (a pause between GET and GETSET: the window in which redlock
            -- takes the lock; reading a missing key as expiry 0 lost it)
            workers[i] = helper.spawn("spec/workers/seed004_counter.lua", noscript.socket, key, counter, 40, 5)
        end
        for i = 3, 4 do
            workers[i] = helper.spawn("spec/workers/legacy_counter.lua", noscript.socket,
                i == 3 and "legacy" or "auto", key, counter, 20, "plain")
        end
        for i, w in ipairs(workers) do
            local status, out = w:wait(120000)
            assert.equal(0, status, "worker " .. i .. ": " .. tostring(out))
        end
        assert.equal(2 * 40 + 2 * 20, num(data, counter))
        data:close()
    end)

    it("contention (bare recipe): loses no update", function()
        assert.equal(3 * 20, contention(nowatch, "legacy", 3, 20))
    end)
end)
