-- The contended policy's order where clocks and servers disagree (cases
-- found by reading the scripts). A waiter's age is the server's clock now less its place's
-- score (the server's clock at its first refusal); a server clock stepped
-- back (an NTP step, the torture run's nemesis) makes every waiter queued
-- before the step look younger than the bound for as long as the step,
-- so releases wake it to compete instead of handing it the lock, and
-- newcomers pass it. (Orders of events only, never durations.)
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"
local notify = require "redlock.notify"
local quorum = require "redlock.quorum"

local function first_line(cmd) return (helper.read_cmd(cmd .. " 2>/dev/null"):match("[^\n]+")) end
local SERVERS = os.getenv("REDLOCK_SERVERS") or "../shared/servers"
local BIN = helper.read_cmd("cd " .. helper.quote(SERVERS) .. " 2>/dev/null && pwd"):gsub("%s+$", "") .. "/redis-7.4.1"
local LIBFAKETIME = first_line("ls /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1")

local function set_offset(path, s)
    local f = assert(io.open(path, "w"))
    f:write(string.format("%+.3f\n", s))
    f:close()
end

-- A redis-server whose clock follows server.offset (as spec/74).
local function skewed_server()
    local path = helper.fresh_dir("clock") .. "/offset"
    set_offset(path, 0)
    local dir = path:match("^(.*)/[^/]+$")
    local f = assert(io.open(dir .. "/redis-server", "w"))
    f:write("#!/bin/sh\nexec env LD_PRELOAD=", LIBFAKETIME, " FAKETIME_TIMESTAMP_FILE=", path,
        " FAKETIME_NO_CACHE=1 ", helper.quote(BIN .. "/redis-server"), ' "$@"\n')
    f:close()
    assert(os.execute("chmod +x " .. helper.quote(dir .. "/redis-server")))
    local server = helper.start_server { exec = "env PATH=" .. dir .. ":$PATH " }
    server.offset = path
    return server
end

describe("contended policy: a waiter queued before a clock step back", function()
    if not LIBFAKETIME or not first_line("ls " .. helper.quote(BIN .. "/redis-server")) then
        pending("skipped: no libfaketime or libc-malloc redis-server")
        return
    end
    teardown(function() helper.stop_all() end)

    it("a waiter queued before the server's clock stepped back, past the bound in real time, is handed the lock",
        function()
            local server = skewed_server()
            local data = core.conn(server:spec())
            local c = redlock.new { servers = { server:url() } }
            local key, w = helper.key("stepped-back"), redlock.token()
            local lock = assert(c:acquire(key, { ttl = 60000 }))
            -- the waiter's refused attempt, as redlock.scripted sends it ("h":
            -- it blocks on its hand-off list)
            local r = data:command("EVAL", core.scripts.acquire.source, 5, key, notify.waiters_key(key),
                notify.data_key(key), notify.handoff_key(key, w), "redlock:fences", w, "10000", "1000", "h")
            assert.equal(0, r[1])
            local since = tonumber(data:command("ZSCORE", notify.waiters_key(key), w))
            -- the waiter has waited past the bound (real time, and the server's)
            assert.is_true(helper.server_clock_past(data, tonumber(notify.BARGE_MS) * 1000, since))
            -- then the server's clock steps back a minute
            set_offset(server.offset, -60)
            assert.is_true(lock:release())
            -- the release should have handed it the key: it waited longest,
            -- and longer than the bound
            assert.equal(w, data:command("GET", key))
            local _, _, code = c:try_acquire(key)
            assert.equal("locked", code)
            set_offset(server.offset, 0)
            data:command("DEL", key)
            data:close()
            c:close()
            server:stop()
        end)
end)

-- Redlock waiters over 3 servers, at the level of the scripts: each
-- attempt is scripts/acquire.lua with the arguments redlock.quorum sends a
-- waiter (waiting, "o", the bound, the last attempt's token, and once a
-- majority queued it its score: the median of the places they gave it),
-- and a failed attempt's take-back is scripts/release.lua. Three waiters whose places
-- are ordered differently on each server (each first on one, the others
-- the bound or more behind it) and whose attempts overlap: each server
-- grants only its front, so each waiter gets one server; the grant takes
-- the waiter off that server's queue, so its next attempt there queues at
-- the back, and the fronts rotate: the votes split again every round,
-- while the key is free everywhere.
describe("Redlock waiters whose places differ between servers", function()
    local N = 3
    local servers, data = {}, {}
    setup(function()
        for i = 1, N do
            servers[i] = helper.start_server()
            data[i] = core.conn(servers[i]:spec())
        end
    end)
    teardown(function()
        for i = 1, N do data[i]:close() end
        helper.stop_all()
    end)

    -- granted, and the place a refusal gave
    local function attempt(i, key, token, prev, score)
        local r = data[i]:command("EVAL", core.scripts.acquire.source, 5, key, notify.waiters_key(key),
            notify.data_key(key), notify.handoff_key(key, token), "redlock:fences", token, "10000", "100", "o",
            quorum.trail(prev, score))
        return r[1] == 1, r[4]
    end
    local function take_back(i, key, token)
        local r = data[i]:command("EVAL", core.scripts.release.source, 2, key, notify.waiters_key(key), token)
        if r == 2 then
            r = data[i]:command("EVAL", core.scripts.release.source, 5, key, notify.waiters_key(key),
                notify.data_key(key), notify.wake_key(key), "redlock:fences", token, notify.handoff_prefix(key))
        end
        return r
    end
    -- until server i's clock is the bound past token's place
    local function grow_old(i, key, token)
        local since = tonumber(data[i]:command("ZSCORE", notify.waiters_key(key), token))
        assert.is_true(helper.server_clock_past(data[i], 2 * tonumber(notify.BARGE_MS) * 1000, since))
    end

    -- until every server's clock is the bound past now (the waiters' rounds
    -- come a recheck or a wake-up apart, more than the bound)
    local function pass_bound()
        for i = 1, N do
            assert.is_true(helper.server_clock_past(data[i], 2 * tonumber(notify.BARGE_MS) * 1000))
        end
    end

    it("one of three waiters gets a majority of the free key within a few rounds", function()
        local key = helper.key("cycle")
        local names = { "a", "b", "c" }
        local tok = { a = redlock.token(), b = redlock.token(), c = redlock.token() }
        for i = 1, N do data[i]:command("SET", key, "holder", "PX", "60000") end
        -- server 1 queues a, b, c; server 2 b, c, a; server 3 c, a, b
        local places, score = { a = {}, b = {}, c = {} }, {}
        for i = 1, N do
            for k = 0, 2 do
                local name = names[(i - 1 + k) % 3 + 1]
                local granted, at = attempt(i, key, tok[name])
                assert.is_false(granted)
                places[name][i] = at
                grow_old(i, key, tok[name])
            end
        end
        for _, name in ipairs(names) do
            score[name] = quorum.place_of({ 1, 2, 3 }, { false, false, false }, places[name], 2)
        end
        for i = 1, N do assert.equal(3, take_back(i, key, "holder")) end
        local won, rounds = nil, {}
        for _ = 1, 6 do
            local got, next_tok = { a = {}, b = {}, c = {} }, {}
            -- the three attempts overlap: every grant before any take-back
            for _, name in ipairs(names) do
                next_tok[name] = redlock.token()
                for i = 1, N do
                    if attempt(i, key, next_tok[name], tok[name], score[name]) then
                        got[name][#got[name] + 1] = i
                    end
                end
            end
            for _, name in ipairs(names) do
                if #got[name] >= 2 then won = name end
            end
            rounds[#rounds + 1] = string.format("a %s, b %s, c %s", table.concat(got.a, ","),
                table.concat(got.b, ","), table.concat(got.c, ","))
            if won then break end
            for _, name in ipairs(names) do
                for _, i in ipairs(got[name]) do take_back(i, key, next_tok[name]) end
                tok[name] = next_tok[name]
            end
            for i = 1, N do assert.equal(0, data[i]:command("EXISTS", key)) end
            pass_bound()
        end
        assert.truthy(won, "six rounds, the key free on every server, and each waiter got one server each"
            .. " time (the servers each granted: " .. table.concat(rounds, "; ") .. ")")
    end)
end)
