-- The redlock command, run as real processes (bin/redlock under the suite's
-- interpreter) against real redis-servers; its parser in-process.
local helper = require "helper"
local core = require "redlock.core"
local cli = require "redlock.cli"
local args = require "redlock.cli.args"

local proc, now = core.proc, core.now
local LUA = os.getenv("REDLOCK_LUA") or "lua5.4"

-- Every REDLOCK_* variable the command reads, emptied (= unset) unless a
-- test sets it, so the caller's environment cannot leak in.
local VARS = {
    "REDLOCK_SERVERS", "REDLOCK_TTL", "REDLOCK_WAIT", "REDLOCK_MODE", "REDLOCK_CONNECT_TIMEOUT",
    "REDLOCK_TIMEOUT", "REDLOCK_KILL_ON_LOST", "REDLOCK_CONFLICT_EXIT_CODE", "REDLOCK_QUIET",
    "REDLOCK_PASSWORD", "REDLOCK_USERNAME", "REDLOCK_REPLICAS", "REDLOCK_REPLICA_TIMEOUT",
    "REDLOCK_VERBOSE", "REDLOCK_LIMIT", "REDLOCK_SHARED",
}

local function read(path)
    local f = io.open(path)
    if not f then return nil end
    local s = f:read("*a")
    f:close()
    return s
end

--- Starts `bin/redlock argv...` with stdout and stderr in files; returns a
-- handle {pid, dir, t0}. The sh execs the command, so pid is redlock's.
local function start(argv, env, prefix)
    local dir = helper.fresh_dir("cli")
    local full = { "sh", "-c", 'exec >"$0/out" 2>"$0/err"; exec "$@"', dir }
    for _, a in ipairs(prefix or {}) do full[#full + 1] = a end
    full[#full + 1] = LUA
    full[#full + 1] = "bin/redlock"
    for _, a in ipairs(argv) do full[#full + 1] = a end
    local e = {}
    for _, v in ipairs(VARS) do e[v] = "" end
    for k, v in pairs(env or {}) do e[k] = v end
    local pid = assert(proc.spawn(full, { env = e }))
    return { pid = pid, dir = dir, t0 = now() }
end

--- Waits (at most limit ms) for a started command. Returns its exit code
-- (128+N when killed by signal N), stdout, stderr, ms since start.
local function finish(h, limit)
    local how, v = proc.wait(h.pid, limit or 30000)
    if not how then
        proc.kill(h.pid, "KILL")
        proc.wait(h.pid, 5000)
        error("redlock did not finish within " .. (limit or 30000) .. " ms")
    end
    local code = how == "exit" and v or 128 + v
    return code, read(h.dir .. "/out"), read(h.dir .. "/err"), now() - h.t0
end

local function redlock(argv, env, limit) return finish(start(argv, env), limit) end

local function wait_for(pred, limit)
    local t0 = now()
    while now() - t0 < (limit or 10000) do
        local v = pred()
        if v then return v end
        helper.sleep(20)
    end
    error("condition not met in time")
end

-- The pid a CMD wrote with `echo $$ >file`, once the line is complete
-- (the file exists, empty, before echo writes).
local function wait_for_pid(path)
    return tonumber(wait_for(function() return (read(path) or ""):match("^(%d+)\n") end))
end

-- A zombie counts as dead: a container's pid 1 may never reap orphans.
local function alive(pid)
    if proc.kill(pid, 0) ~= true then return false end
    local stat = read("/proc/" .. pid .. "/stat")
    return not (stat and stat:match("^%d+ %b() Z"))
end

describe("redlock command", function()
    local server, data, url

    setup(function()
        server = helper.start_server()
        data = core.conn(server:spec())
        url = server:url()
    end)
    teardown(function()
        data:close()
        helper.stop_all()
    end)

    describe("usage", function()
        it("bad usage: one-line error, the usage, exit 64, never a traceback", function()
            for _, argv in ipairs({
                {}, { "frob", "k" }, { "run", "k" }, { "run" }, { "--nope", "status", "k" },
                { "status", "k", "extra" }, { "release", "k" }, { "--ttl", "0", "status", "k" },
                { "--ttl", "soon", "status", "k" }, { "-m", "fast", "status", "k" },
                { "-E", "300", "status", "k" }, { "status", "" }, { "--ttl" },
                -- statuses redlock gives for something else
                { "-E", "75", "status", "k" }, { "-E", "0", "status", "k" }, { "-E", "69", "status", "k" },
                { "-E", "126", "status", "k" }, { "-E", "130", "status", "k" },
            }) do
                local code, out, err = redlock(argv)
                local shown = table.concat(argv, " ")
                assert.equal(64, code, shown)
                assert.equal("", out, shown)
                assert.matches("^redlock: [^\n]+\nusage: redlock run ", err, 1, shown)
                assert.is_nil(err:find("traceback", 1, true), shown)
            end
        end)

        it("-E takes only a status redlock gives for nothing else, and says which are free", function()
            -- one message, whatever the reason (used by redlock, out of range,
            -- no number)
            for _, e in ipairs { "75", "0", "64", "126", "200", "300", "x" } do
                local code, _, err = redlock({ "-E", e, "status", "k" })
                assert.equal(64, code, e)
                assert.equal("redlock: --conflict-exit-code: expected a status redlock gives for nothing else"
                    .. " (free: 1-63, 65-68, 72-74, 78-125), got '" .. e .. "'", err:match("^[^\n]*"), e)
            end
            local codes = require "redlock.cli.codes"
            for n = 0, 255 do
                local used = n == 0 or n == 64 or (n >= 69 and n <= 71) or (n >= 75 and n <= 77) or n >= 126
                assert.equal(not used, codes.free(n), n)
            end
        end)

        it("--help prints the reference and exits 0; --version the version", function()
            local code, out = redlock({ "--help" })
            assert.equal(0, code)
            assert.matches("Exit status:", out)
            assert.matches("REDLOCK_SERVERS", out)
            code, out = redlock({ "-V" })
            assert.equal(0, code)
            assert.equal("redlock " .. require("redlock").VERSION .. "\n", out)
        end)

        it("a missing CMD is a usage error", function()
            local code, _, err = redlock({ "--server", url, "run", helper.key(), "--" })
            assert.equal(64, code)
            assert.matches("^redlock: run: missing CMD", err)
        end)

        it("main() never raises, and returns the code", function()
            local out, err = {}, {}
            local function sink(t)
                return { write = function(_, ...) for _, s in ipairs({ ... }) do t[#t + 1] = s end end }
            end
            local code = cli.main({ "run", "k" }, function() return nil end, sink(out), sink(err))
            assert.equal(64, code)
            assert.matches("^redlock: run: missing CMD", table.concat(err))
        end)
    end)

    describe("parsing", function()
        local function env(t) return function(name) return t[name] end end
        local none = env({})

        it("reads options before, between and after the words, up to CMD", function()
            local cfg = args.parse({ "-q", "run", "--ttl=5s", "k", "-w", "2m", "ls", "-l", "--ttl", "x" },
                none)
            assert.equal("run", cfg.command)
            assert.equal("k", cfg.key)
            assert.same({ "ls", "-l", "--ttl", "x" }, cfg.cmd)
            assert.equal(5000, cfg.ttl)
            assert.equal(120000, cfg.wait)
            assert.is_true(cfg.quiet)
            cfg = args.parse({ "run", "-qkt1500", "--", "-odd-key", "--", "echo" }, none)
            assert.equal("-odd-key", cfg.key)
            assert.same({ "--", "echo" }, cfg.cmd)
            assert.equal(1500, cfg.ttl)
            assert.is_true(cfg.kill_on_lost and cfg.quiet)
        end)

        it("takes durations with units", function()
            assert.equal(1500, args.duration("1500"))
            assert.equal(1500, args.duration("1500ms"))
            assert.equal(1100, args.duration("1.1s"))
            assert.equal(120000, args.duration("2m"))
            assert.equal(3600000, args.duration("1h"))
            assert.is_nil(args.duration("0.5ms"))
            assert.is_nil(args.duration("5 s"))
            assert.is_nil(args.duration("-5"))
            assert.is_nil(args.duration(""))
        end)

        it("falls back to the environment; the command line wins", function()
            local e = env({ REDLOCK_TTL = "3s", REDLOCK_WAIT = "0", REDLOCK_MODE = "script",
                REDLOCK_SERVERS = "redis://127.0.0.1:7001, redis://127.0.0.1:7002 unix:///tmp/x.sock",
                REDLOCK_QUIET = "yes", REDLOCK_CONFLICT_EXIT_CODE = "3", REDLOCK_KILL_ON_LOST = "0" })
            local cfg = args.parse({ "status", "k" }, e)
            assert.equal(3000, cfg.ttl)
            assert.equal(0, cfg.wait)
            assert.equal("script", cfg.mode)
            assert.equal(3, #cfg.servers)
            assert.equal(7002, cfg.servers[2].port)
            assert.equal("/tmp/x.sock", cfg.servers[3].path)
            assert.is_true(cfg.quiet)
            assert.is_false(cfg.kill_on_lost)
            assert.equal(3, cfg.conflict_code)
            cfg = args.parse({ "-s", "redis://h:1", "--ttl", "9", "status", "k" }, e)
            assert.equal(9, cfg.ttl)
            assert.equal(1, #cfg.servers)
            assert.equal("h", cfg.servers[1].host)
        end)

        it("REDLOCK_SERVERS keeps a URL with several hosts whole: a comma starts a server only before a scheme",
           function()
            local cfg = args.parse({ "status", "k" }, env({
                REDLOCK_SERVERS = "redis+cluster://127.0.0.1:7001,127.0.0.1:7002, 127.0.0.1:7003" }))
            assert.equal(1, #cfg.servers)
            assert.same({ { host = "127.0.0.1", port = 7001 }, { host = "127.0.0.1", port = 7002 },
                { host = "127.0.0.1", port = 7003 } }, cfg.servers[1].cluster)
            cfg = args.parse({ "status", "k" }, env({ REDLOCK_SERVERS =
                "redis+sentinel://s1:26379,s2/mymaster,redis://h:1 unix:///tmp/x.sock,rediss://h2" }))
            assert.equal(4, #cfg.servers)
            assert.equal(2, #cfg.servers[1].sentinels)
            assert.equal("mymaster", cfg.servers[1].master_name)
            assert.equal(1, cfg.servers[2].port)
            assert.equal("/tmp/x.sock", cfg.servers[3].path)
            assert.equal("h2", cfg.servers[4].host)
            assert.same({ "redis://a,b", "unix:///s" }, args.split_servers(" redis://a,b, unix:///s,"))
            local ok, e = pcall(args.parse, { "status", "k" }, env({ REDLOCK_SERVERS = "127.0.0.1:1,redis://h" }))
            assert.is_false(ok)
            assert.matches("^REDLOCK_SERVERS: bad server URL '127.0.0.1:1'", e.usage)
        end)

        it("takes REDLOCK_PASSWORD for servers whose URL has none; never echoes a password", function()
            local cfg = args.parse({ "-s", "redis://h", "-s", "redis://:own@h2", "status", "k" },
                env({ REDLOCK_PASSWORD = "envsecret", REDLOCK_USERNAME = "bob" }))
            assert.equal("envsecret", cfg.servers[1].password)
            assert.equal("bob", cfg.servers[1].username)
            assert.equal("own", cfg.servers[2].password)
            for _, bad in ipairs({ "redis://u:s3/cr@t@host:1", "redis:/:s3cr\"t@host",
                "redis://:s3cr@t@h:x" }) do
                local ok, e = pcall(args.parse, { "status", "k" }, env({ REDLOCK_SERVERS = bad }))
                assert.is_false(ok)
                assert.matches("^REDLOCK_SERVERS: bad server URL", e.usage)
                assert.is_nil(e.usage:find("s3cr", 1, true), e.usage)
            end
        end)
    end)

    describe("run", function()
        it("runs CMD holding the lock, with REDLOCK_* set; releases it; passes the status", function()
            local key = helper.key()
            local code, out, err = redlock({ "-s", url, "run", key, "--", "sh", "-c",
                'echo "$REDLOCK_KEY|$REDLOCK_TOKEN|$REDLOCK_FENCE|$REDLOCK_TTL"; '
                    .. "redis-cli -p " .. server.port .. ' GET "$REDLOCK_KEY"; exit 7' })
            assert.equal(7, code, err)
            local k, token, fence, ttl, held = out:match("^(.-)|(%x+)|(%d+)|(%d+)\n(%x+)\n$")
            assert.equal(key, k)
            assert.equal(token, held)
            assert.equal(helper.last_fence(data), fence)
            assert.equal("10000", ttl)
            assert.equal(0, data:command("EXISTS", key))
        end)

        it("--verbose (-v, REDLOCK_VERBOSE) prints the lock's events on stderr: acquired, extended, released",
            function()
            local key = helper.key()
            local code, out, err = redlock({ "-s", url, "-v", "-t", "300", "run", key, "--", "sh", "-c",
                "sleep 0.5; echo done" })
            assert.equal(0, code, err)
            assert.equal("done\n", out)
            local shown = require("redlock.util").show_key(key)
            local function has(kind) return err:find("redlock: event " .. kind .. " " .. shown, 1, true) end
            assert.truthy(has("acquired"), err)
            assert.truthy(has("extended"), err)
            assert.truthy(has("released"), err)
            assert.matches("waited=%d+ attempts=1 fence=%d+", err)
            local code1, _, err1 = redlock({ "-s", url, "run", key, "--", "true" }, { REDLOCK_VERBOSE = "1" })
            assert.equal(0, code1, err1)
            assert.truthy(err1:find("redlock: event released " .. shown, 1, true), err1)
            local code2, _, err2 = redlock({ "-s", url, "run", key, "--", "true" })
            assert.equal(0, code2, err2)
            assert.equal("", err2)
        end)

        it("passes a killing signal on as 128+N, and 127/126 when CMD cannot run", function()
            local key = helper.key()
            assert.equal(137, (redlock({ "-s", url, "run", key, "sh", "-c", "kill -KILL $$" })))
            local code, _, err = redlock({ "-s", url, "run", key, "--", "no-such-command-here" })
            assert.equal(127, code)
            assert.matches("cannot run 'no%-such%-command%-here'", err)
            assert.equal(126, (redlock({ "-s", url, "run", key, "--", "/" })))
            assert.equal(0, data:command("EXISTS", key))
        end)

        it("two runs on one key serialize: no overlap, no interleaved output", function()
            local key, log = helper.key(), helper.fresh_dir("log") .. "/log"
            local body = 'echo "start $0 $(date +%s%N)" >>' .. log
                .. '; sleep 0.3; echo "end $0 $(date +%s%N)" >>' .. log
            local hs = {}
            for i = 1, 3 do
                hs[i] = start({ "-s", url, "-w", "30s", "run", key, "--", "sh", "-c", body, "p" .. i })
            end
            for i = 1, 3 do assert.equal(0, (finish(hs[i]))) end
            local lines = {}
            for l in read(log):gmatch("[^\n]+") do lines[#lines + 1] = l end
            assert.equal(6, #lines)
            local last_end = 0
            for i = 1, 6, 2 do
                local who, t1 = lines[i]:match("^start (%S+) (%d+)$")
                local who2, t2 = lines[i + 1]:match("^end (%S+) (%d+)$")
                assert.equal(who, who2, "interleaved: " .. read(log))
                assert.is_true(tonumber(t1) >= last_end, "overlap: " .. read(log))
                last_end = tonumber(t2)
            end
        end)

        it("renews the lock while CMD outlives the ttl", function()
            local key = helper.key()
            local h = start({ "-s", url, "--ttl", tostring(helper.ms(1000)), "run", key, "--", "sleep",
                tostring(helper.ms(2500) / 1000) })
            wait_for(function() return data:command("EXISTS", key) == 1 end)
            helper.sleep(helper.ms(1600)) -- well past the ttl
            assert.equal(1, (redlock({ "-s", url, "try", key, "--", "true" })))
            local code, _, err = finish(h)
            assert.equal(0, code, err)
            assert.equal("", err)
        end)

        it("renews a legacy lock (--mode legacy, a server without scripting) while CMD outlives the ttl",
            function()
                local noscript = helper.start_server { config = {
                    'rename-command EVAL ""', 'rename-command EVALSHA ""', 'rename-command SCRIPT ""',
                    'rename-command FUNCTION ""', 'rename-command FCALL ""' } }
                local d
                -- (busted keeps one finally per test)
                finally(function()
                    if d then d:close() end
                    noscript:stop()
                end)
                local lurl, key = noscript:url(), helper.key()
                local h = start({ "-s", lurl, "--mode", "legacy", "--ttl", tostring(helper.ms(1000)), "run", key, "--",
                    "sleep", tostring(helper.ms(3000) / 1000) })
                d = core.conn(noscript:spec())
                wait_for(function() return d:command("EXISTS", key) == 1 end)
                helper.sleep(helper.ms(2000)) -- twice the ttl
                assert.equal(1, (redlock({ "-s", lurl, "--mode", "legacy", "try", key, "--", "true" })))
                local code, _, err = finish(h)
                assert.equal(0, code, err)
                assert.equal("", err)
                assert.equal(0, d:command("EXISTS", key))
            end)

        it("a lost lock: says so on stderr and exits 75 once CMD ends", function()
            local key = helper.key()
            local h = start({ "-s", url, "--ttl", "900", "run", key, "--", "sleep", "1.5" })
            wait_for(function() return data:command("EXISTS", key) == 1 end)
            data:command("DEL", key)
            local code, _, err, took = finish(h)
            assert.equal(75, code)
            assert.matches("lost the lock: not owner: ", err)
            assert.is_true(took >= 1400, "CMD was not left to finish: " .. took)
        end)

        it("--kill-on-lost stops CMD when the lock is lost", function()
            local key = helper.key()
            local h = start({ "-s", url, "--ttl", "900", "--kill-on-lost", "run", key, "--", "sleep", "30" })
            wait_for(function() return data:command("EXISTS", key) == 1 end)
            data:command("DEL", key)
            local code, _, err, took = finish(h, 20000)
            assert.equal(75, code)
            assert.matches("stopping CMD", err)
            assert.is_true(took < 15000, "took " .. took)
        end)

        -- A suite started in the background inherits SIGINT ignored, and so
        -- would redlock (it keeps ignored signals ignored): env(1) resets it.
        local default_int = os.execute("env --default-signal=INT true 2>/dev/null")
        default_int = (default_int == true or default_int == 0) and { "env", "--default-signal=INT" } or nil

        for _, sig in ipairs({ "TERM", "INT" }) do
            it("forwards SIG" .. sig .. " to CMD and releases the lock", function()
                local key, dir = helper.key(), helper.fresh_dir("sig")
                local h = start({ "-s", url, "run", key, "--", "sh", "-c",
                    'trap "echo got $0; exit 5" ' .. sig .. '; touch "$1"; '
                        .. 'i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done',
                    sig, dir .. "/ready" }, nil, default_int)
                wait_for(function() return read(dir .. "/ready") end)
                assert.is_true(proc.kill(h.pid, sig))
                local code, out = finish(h)
                assert.equal(5, code)
                assert.equal("got " .. sig .. "\n", out)
                assert.equal(0, data:command("EXISTS", key))
            end)
        end

        it("kill -9 of the holder: the next run gets the lock right after the ttl", function()
            local key, dir = helper.key(), helper.fresh_dir("k9")
            local a = start({ "-s", url, "--ttl", "1500", "run", key, "--", "sh", "-c",
                'echo $$ >"$0/cmd"; exec sleep 30', dir })
            local cmd_pid = wait_for_pid(dir .. "/cmd")
            assert.is_true(proc.kill(a.pid, "KILL"))
            assert.equal("signal", (proc.wait(a.pid, 5000)))
            local pttl = data:command("PTTL", key)
            local t0 = now()
            local code, _, err = redlock({ "-s", url, "-w", "20s", "run", key, "--", "true" })
            local took = now() - t0
            proc.kill(cmd_pid, "KILL") -- without --kill-on-lost, CMD outlives redlock
            assert.equal(0, code, err)
            assert.is_true(pttl > 0 and took + 50 >= pttl,
                "got it before the expiry: " .. took .. " < " .. pttl)
            assert.is_true(took < 1500 + 5000, "took " .. took)
        end)

        it("kill -9 of the holder with --kill-on-lost: CMD gets SIGTERM (Linux)", function()
            if not proc.can_die_with_parent then return end
            local key, dir = helper.key(), helper.fresh_dir("k9k")
            local a = start({ "-s", url, "-k", "run", key, "--", "sh", "-c",
                'echo $$ >"$0/cmd"; exec sleep 30', dir })
            local cmd_pid = wait_for_pid(dir .. "/cmd")
            proc.kill(a.pid, "KILL")
            proc.wait(a.pid, 5000)
            wait_for(function() return not alive(cmd_pid) end)
        end)
    end)

    describe("try", function()
        it("on a held key exits 1 at once (or the -E code), CMD not run", function()
            local key = helper.key()
            data:command("SET", key, "someone-else", "PX", "20000")
            local code, out, err, took = redlock({ "-s", url, "try", key, "--", "echo", "ran" })
            assert.equal(1, code)
            assert.equal("", out)
            assert.matches("^redlock: locked: ", err)
            assert.is_true(took < 3000, "took " .. took)
            assert.equal(9, (redlock({ "-s", url, "-E", "9", "try", key, "--", "echo", "ran" })))
            local _
            code, _, err = redlock({ "-s", url, "-q", "-w", "200", "run", key, "--", "echo", "ran" })
            assert.equal(1, code)
            assert.equal("", err)
        end)

        it("without CMD takes the lock and prints its token", function()
            local key = helper.key()
            local code, out = redlock({ "-s", url, "--ttl", "5000", "try", key })
            assert.equal(0, code)
            assert.equal(data:command("GET", key) .. "\n", out)
            local pttl = data:command("PTTL", key)
            assert.is_true(pttl > 3000 and pttl <= 5000)
        end)
    end)

    describe("acquire, status, extend, release", function()
        it("round-trips a lock through the shell by its token", function()
            local key = helper.key()
            local code, out = redlock({ "-s", url, "status", key })
            assert.equal(1, code)
            -- fence: the last the server gave, for any key
            assert.matches("^free server=127%.0%.0%.1:%d+ fence=%d+\n$", out)

            code, out = redlock({ "-s", url, "-t", "30s", "acquire", key })
            assert.equal(0, code)
            local token = out:match("^(%x+)\n$")
            assert.equal(32, #token)
            assert.equal(token, data:command("GET", key))

            code, out = redlock({ "-s", url, "status", key })
            assert.equal(0, code)
            local prefix, ms, fence =
                out:match("^held server=%S+ token=(%x+) remaining_ms=(%d+) fence=(%d+)\n$")
            assert.equal(token:sub(1, 8), prefix)
            assert.is_true(tonumber(ms) > 20000 and tonumber(ms) <= 30000)
            assert.equal(helper.last_fence(data), fence)
            assert.equal(0, (redlock({ "-s", url, "-q", "status", key })))

            assert.equal(0, (redlock({ "-s", url, "-t", "2m", "extend", key, token })))
            assert.is_true(data:command("PTTL", key) > 100000)
            local _, err
            code, _, err = redlock({ "-s", url, "release", key, "not-the-token" })
            assert.equal(1, code)
            assert.matches("^redlock: not owner: ", err)
            assert.equal(1, (redlock({ "-s", url, "extend", key, "not-the-token" })))
            assert.equal(token, data:command("GET", key))
            assert.equal(0, (redlock({ "-s", url, "release", key, token })))
            assert.equal(0, data:command("EXISTS", key))
            assert.equal(1, (redlock({ "-s", url, "release", key, token })))
        end)

        it("acquire waits up to --wait, then exits 1 with 'timeout'", function()
            local key = helper.key()
            data:command("SET", key, "x", "PX", "20000")
            local code, _, err, took = redlock({ "-s", url, "-w", "400", "acquire", key })
            assert.equal(1, code)
            assert.matches("^redlock: timeout: waited 400 ms", err)
            assert.is_true(took >= 400, "took " .. took)
        end)

        it("reads servers from REDLOCK_SERVERS and talks over a unix socket", function()
            local key = helper.key()
            local code = redlock({ "acquire", key },
                { REDLOCK_SERVERS = "unix://" .. server.socket, REDLOCK_TTL = "3s" })
            assert.equal(0, code)
            local pttl = data:command("PTTL", key)
            assert.is_true(pttl > 1000 and pttl <= 3000)
        end)
    end)

    describe("Redis down", function()
        it("a refused connection exits 69 well within the connect timeout", function()
            local gone = helper.start_server()
            local gone_url = gone:url()
            gone:stop()
            for _, sub in ipairs({ { "run", helper.key(), "--", "echo", "ran" }, { "status", "k" },
                { "try", helper.key() }, { "release", "k", "t" } }) do
                local argv = { "-s", gone_url, "--connect-timeout", "500" }
                for _, a in ipairs(sub) do argv[#argv + 1] = a end
                local code, out, err, took = redlock(argv)
                assert.equal(69, code, err)
                assert.equal("", out)
                assert.matches("^redlock: connection: 127%.0%.0%.1:%d+: could not connect", err)
                assert.is_true(took < 500 + 3000, "took " .. took)
            end
        end)

        it("a server that does not answer exits 69 after the timeouts", function()
            local frozen = helper.start_server()
            frozen:freeze()
            local code, _, err, took = redlock({ "-s", frozen:url(), "--connect-timeout", "300",
                "--timeout", "300", "run", helper.key(), "--", "echo", "ran" })
            frozen:stop()
            assert.equal(69, code)
            assert.matches("^redlock: connection: .*timed out", err)
            assert.is_true(took < 300 + 300 + 3000, "took " .. took)
        end)
    end)

    describe("passwords", function()
        local locked
        setup(function() locked = helper.start_server { password = "pw-Secret1" } end)

        it("come from REDLOCK_PASSWORD; a wrong one exits 77 without echoing it", function()
            local key = helper.key()
            local code, _, err = redlock({ "-s", locked:url(), "status", key },
                { REDLOCK_PASSWORD = "pw-Secret1" })
            assert.equal(1, code, err)
            code, _, err = redlock({ "-s", locked:url(), "status", key }, { REDLOCK_PASSWORD = "pw-Wrong1" })
            assert.equal(77, code)
            assert.is_nil(err:find("pw-Wrong1", 1, true), err)
            code, _, err = redlock({ "-s", "redis://:pw-Wrong2@127.0.0.1:" .. locked.port, "run", key,
                "true" })
            assert.equal(77, code)
            assert.is_nil(err:find("pw-Wrong2", 1, true), err)
            code, _, err = redlock({ "-s", locked:url(), "status", key })
            assert.equal(77, code)
            assert.matches("NOAUTH", err)
        end)
    end)
end)
