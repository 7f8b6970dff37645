-- Clock jumps (issue 38), with libfaketime (Debian's faketime): a lock
-- server's clock stepped forward or back (Redis expires keys by its own
-- wall clock), and the client's wall clock stepped (its validity counts on
-- the monotonic clock, which an NTP step leaves alone). The offset is a
-- file that libfaketime reads at every clock call, so a running process's
-- clock jumps when the spec rewrites it.
--
-- The servers are the libc-malloc builds of ../shared/servers (Debian's
-- jemalloc-linked redis-server fails under libfaketime: "unexpected
-- recursive calls to clock_gettime()"); without them, or without
-- libfaketime, the suite says why it is skipped. What Redlock's drift
-- allowance covers and what it does not: docs/guarantees.md#clocks.
local helper = require "helper"
local redlock = require "redlock"

local function first_line(cmd) return (helper.read_cmd(cmd .. " 2>/dev/null"):match("[^\n]+")) end

local SERVERS = os.getenv("REDLOCK_SERVERS") or "../shared/servers"
-- (absolute: the servers' PATH is theirs)
local BIN = helper.read_cmd("cd " .. helper.quote(SERVERS) .. " 2>/dev/null && pwd"):gsub("%s+$", "") .. "/redis-7.4.1"
local LIBFAKETIME = first_line("ls /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1")

local function missing()
    local why = helper.lua54_only()
    if why then return why end
    if not LIBFAKETIME then return "no libfaketime (Debian's faketime)" end
    if not first_line("ls " .. helper.quote(BIN .. "/redis-server")) then
        return "no libc-malloc redis-server in " .. BIN .. " (Debian's jemalloc build cannot run under libfaketime)"
    end
    return nil
end
local skip = missing()

-- A file of libfaketime's offset ("+0", "+5.5", "-3600": seconds).
local function offset_file()
    local path = helper.fresh_dir("clock") .. "/offset"
    local f = assert(io.open(path, "w"))
    f:write("+0\n")
    f:close()
    return path
end

local function set_offset(path, s)
    local f = assert(io.open(path, "w"))
    f:write(string.format("%+.3f\n", s))
    f:close()
end

-- The environment that puts a process under libfaketime, its clock read
-- from the offset file at every call (no cache). monotonic = false: only
-- the wall clock moves (an NTP step).
local function faked(path, monotonic)
    return string.format("env LD_PRELOAD=%s FAKETIME_TIMESTAMP_FILE=%s FAKETIME_NO_CACHE=1 %s", LIBFAKETIME,
        path, monotonic == false and "FAKETIME_DONT_FAKE_MONOTONIC=1 " or "")
end

-- A redis-server whose clock follows the offset file (server.offset): a
-- `redis-server` script first on PATH execs the libc-malloc build under
-- libfaketime (redis-cli, Debian's, must not run under it).
local function skewed_server()
    local path = offset_file()
    local dir = path:match("^(.*)/[^/]+$")
    local f = assert(io.open(dir .. "/redis-server", "w"))
    f:write("#!/bin/sh\nexec ", faked(path), helper.quote(BIN .. "/redis-server"), ' "$@"\n')
    f:close()
    assert(os.execute("chmod +x " .. helper.quote(dir .. "/redis-server")))
    local server = helper.start_server { exec = "env PATH=" .. dir .. ":$PATH " }
    server.offset = path
    return server
end

local function pttl(server, key) return tonumber(server:cli("PTTL", key)) end

describe("clock jumps", function()
    if skip then
        pending("skipped: " .. skip)
        return
    end
    teardown(function() helper.stop_all() end)

    describe("a server's clock", function()
        it("before 2026 (the fences' epoch): fences from 1 on, rising", function()
            local server = skewed_server()
            set_offset(server.offset, -400 * 86400)
            local client = redlock.new { servers = { server:url() } }
            local last = 0
            for i = 1, 4 do
                -- (the first by the script, the next without one, then the script again)
                local lock = assert(client:acquire(helper.key("early")))
                assert.is_true(lock.fence ~= nil and lock.fence > last,
                    string.format("grant %d: fence %s after %d", i, tostring(lock.fence), last))
                last = lock.fence
                assert.is_true(lock:release())
            end
            client:close()
            server:stop()
        end)

        it("jumping forward by less than the drift allowance: the validity still ends before the key",
            function()
                local server = skewed_server()
                local client = redlock.new { servers = { server:url() } }
                local key = helper.key("small-jump")
                -- ttl 60 s: the allowance is 60000 * 0.01 + 2 = 602 ms
                local lock = assert(client:acquire(key, { ttl = 60000 }))
                set_offset(server.offset, 0.3)
                local left = pttl(server, key) -- the server's, read first
                assert.is_true(lock:remaining() <= left,
                    string.format("remaining %.0f ms, the key only %d", lock:remaining(), left))
                assert.is_true(lock:release())
                client:close()
                server:stop()
            end)

        it("jumping forward by more: the key expires early, a second holder while the first is valid", function()
            local server = skewed_server()
            local a = redlock.new { servers = { server:url() } }
            local b = redlock.new { servers = { server:url() } }
            local key = helper.key("big-jump")
            local lock = assert(a:acquire(key, { ttl = 10000 }))
            set_offset(server.offset, 12)
            assert.equal("0", server:cli("EXISTS", key))
            local second = assert(b:try_acquire(key))
            assert.is_true(lock:remaining() > 0, "two holders: what no drift allowance covers")
            assert.is_true(second.fence > lock.fence)
            assert.is_true(second:release())
            a:close()
            b:close()
            server:stop()
        end)

        it("jumping back: a key outlives its ttl by the jump (a crashed holder's lock stays that long)",
            function()
                local server = skewed_server()
                local client = redlock.new { servers = { server:url() } }
                local key = helper.key("back")
                assert(client:acquire(key, { ttl = 2000 }))
                set_offset(server.offset, -3600)
                assert.is_true(pttl(server, key) > 3600000, "pttl " .. pttl(server, key))
                helper.sleep(2100)
                assert.equal("1", server:cli("EXISTS", key))
                -- the clock back where it was: the key's own ttl again
                set_offset(server.offset, 0)
                assert.equal("0", server:cli("EXISTS", key))
                client:close()
                server:stop()
            end)

        it("Redlock: one server of three jumping forward changes nothing, two let a second holder in", function()
            local list, urls = {}, {}
            for i = 1, 3 do
                list[i] = skewed_server()
                urls[i] = list[i]:url()
            end
            local a = redlock.new { servers = urls }
            local b = redlock.new { servers = urls }
            local key = helper.key("redlock-jump")
            local lock = assert(a:acquire(key, { ttl = 10000 }))
            set_offset(list[1].offset, 3600)
            assert.equal("0", list[1]:cli("EXISTS", key))
            local _, _, code = b:try_acquire(key)
            assert.equal("locked", code)
            set_offset(list[2].offset, 3600)
            local second = assert(b:try_acquire(key))
            assert.is_true(lock:remaining() > 0, "two holders: a majority of clocks jumped")
            assert.is_true(second:release())
            a:close()
            b:close()
            for _, s in ipairs(list) do s:stop() end
        end)
    end)

    -- Under contention (issue 48): a waiter's age is the server's clock now
    -- less its place (the server's clock at its first refusal). A clock
    -- stepped back makes that negative: such a waiter counts as old (handed
    -- the lock, passed by no newcomer), and a waiter that comes after the
    -- step queues behind it. Each case at the level of the scripts, with the
    -- arguments the library sends.
    describe("a server's clock stepped back under contention", function()
        local core = require "redlock.core"
        local notify = require "redlock.notify"

        local function eval(conn, name, ...)
            return conn:command("EVAL", core.scripts[name].source, ...)
        end
        -- a waiter's refused attempt, queued as one that blocks on its
        -- hand-off list ("h"; a Redlock waiter: "o" and the bound)
        local function queue(conn, key, token, ...)
            local r = eval(conn, "acquire", 5, key, notify.waiters_key(key), notify.data_key(key),
                notify.handoff_key(key, token), "redlock:fences", token, "30000", "10000", ...)
            assert.equal(0, r[1])
        end
        -- until the server's clock says token waited longer than the bound
        local function grow_old(conn, key, token)
            local since = tonumber(conn:command("ZSCORE", notify.waiters_key(key), token))
            assert.is_true(helper.server_clock_past(conn, tonumber(notify.BARGE_MS) * 1000, since))
        end
        local function setup_server()
            local server = skewed_server()
            return server, core.conn(server:spec()), redlock.new { servers = { server:url() } }
        end
        local function done(server, conn, c)
            conn:close()
            c:close()
            server:stop()
        end

        it("a waiter past the bound when the clock steps back is handed the lock by the release", function()
            local server, conn, c = setup_server()
            local key, w = helper.key("stepped-back"), redlock.token()
            local lock = assert(c:acquire(key, { ttl = 60000 }))
            queue(conn, key, w, "h")
            grow_old(conn, key, w)
            set_offset(server.offset, -60)
            assert.is_true(lock:release())
            assert.equal(w, conn:command("GET", key))
            local _, _, code = c:try_acquire(key)
            assert.equal("locked", code)
            done(server, conn, c)
        end)

        it("a waiter that comes after the step queues behind the one that came before it", function()
            local server, conn, c = setup_server()
            local key, first, second = helper.key("behind"), redlock.token(), redlock.token()
            local lock = assert(c:acquire(key, { ttl = 60000 }))
            queue(conn, key, first, "h")
            grow_old(conn, key, first)
            set_offset(server.offset, -60)
            queue(conn, key, second, "h")
            assert.same({ first, second }, conn:command("ZRANGE", notify.waiters_key(key), 0, -1))
            assert.is_true(lock:release())
            assert.equal(first, conn:command("GET", key))
            done(server, conn, c)
        end)

        it("Redlock's newcomer is refused the free key that a waiter past the bound queues for", function()
            local server, conn, c = setup_server()
            local key, w, n = helper.key("newcomer"), redlock.token(), redlock.token()
            conn:command("SET", key, "holder", "PX", "60000")
            queue(conn, key, w, "o", notify.BARGE_MS)
            grow_old(conn, key, w)
            conn:command("DEL", key)
            set_offset(server.offset, -60)
            local r = eval(conn, "acquire", 5, key, notify.waiters_key(key), notify.data_key(key),
                notify.handoff_key(key, n), "redlock:fences", n, "30000", "0", "o", notify.BARGE_MS)
            assert.same({ 0, -1 }, r)
            done(server, conn, c)
        end)

        -- a semaphore of one permit held by `holder`, and a waiter queued
        local function semaphore(conn, key, w)
            local function sem(token, waiting)
                return eval(conn, "sem_acquire", 5, key, notify.waiters_key(key), notify.data_key(key),
                    notify.handoff_key(key, token), "redlock:fences", token, "30000", "1", waiting, "h", "1",
                    notify.BARGE_MS)
            end
            assert.equal(1, sem("holder", "0")[1])
            assert.equal(0, sem(w, "10000")[1])
            grow_old(conn, key, w)
            return sem
        end

        it("a semaphore's release hands its permit to a waiter past the bound when the clock steps back",
            function()
                local server, conn, c = setup_server()
                local key, w = helper.key("sem-release"), redlock.token()
                semaphore(conn, key, w)
                set_offset(server.offset, -60)
                assert.equal(3, eval(conn, "sem_release", 5, key, notify.waiters_key(key), notify.data_key(key),
                    notify.wake_key(key), "redlock:fences", "holder", notify.handoff_prefix(key), notify.BARGE_MS))
                assert.is_truthy(tonumber(conn:command("ZSCORE", key, w)))
                done(server, conn, c)
            end)

        it("a semaphore's newcomer does not pass a waiter past the bound when the clock steps back", function()
            local server, conn, c = setup_server()
            local key, w = helper.key("sem-newcomer"), redlock.token()
            local sem = semaphore(conn, key, w)
            conn:command("ZREM", key, "holder") -- (the permit free, its holder gone)
            set_offset(server.offset, -60)
            assert.equal(0, sem(redlock.token(), "0")[1])
            done(server, conn, c)
        end)
    end)

    describe("the client's wall clock", function()
        -- libfaketime takes the place of what this suite preloads (make
        -- test-sanitize's runtimes, without which its build cannot load):
        -- there the faked client runs the default build (build/)
        local build = (os.getenv("LD_PRELOAD") or "") ~= "" and "build" or nil
        local f = build and io.open("build/redlock/core.so")
        if f then f:close() end
        if build and not f then
            pending("skipped: the faked client needs the default build (make build)")
            return
        end

        it("jumping forward and back: validity, extend, release and renewal follow the monotonic clock",
            function()
                local server = helper.start_server()
                local path = offset_file()
                local cmd = faked(path, false) .. helper.lua_cmd_in(build, "spec/workers/clock_client.lua",
                    server:url(), helper.key("client-jump"), path)
                local out = helper.read_cmd("timeout 60 " .. cmd .. " 2>&1; echo rc=$?")
                assert.matches("\nok\nrc=0%s*$", out)
                server:stop()
            end)

        it("an hour ahead: script mode is refused; legacy mode takes over a live lock (its documented limit)",
            function()
                local server = helper.start_server()
                local path = offset_file()
                set_offset(path, 3600)
                for _, mode in ipairs({ "script", "legacy" }) do
                    local client = redlock.new { servers = { server:url() }, mode = mode }
                    local key = helper.key("ahead-" .. mode)
                    local lock = assert(client:acquire(key, { ttl = 30000 }))
                    local out = helper.read_cmd("timeout 60 " .. faked(path, false)
                        .. helper.lua_cmd_in(build, "spec/workers/clock_takeover.lua", server:url(), key, mode)
                        .. " 2>&1")
                    if mode == "script" then
                        assert.matches("^refused locked", out)
                        assert.is_true(lock:release())
                    else
                        assert.matches("^taken %d+", out)
                        assert.is_true(lock:remaining() > 0, "two holders: legacy mode trusts the clients' clocks")
                        local _, _, code = lock:release()
                        assert.equal("not owner", code)
                    end
                    client:close()
                end
                server:stop()
            end)
    end)
end)
