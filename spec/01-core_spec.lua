-- The C core on its own: tokens, protocol, connections, scripts.
local helper = require "helper"
local core = require "redlock.core"

describe("redlock.core", function()
    local server
    setup(function() server = helper.start_server() end)
    teardown(function() helper.stop_all() end)

    describe("token()", function()
        it("is 32 lowercase hex chars", function()
            for _ = 1, 100 do assert.matches("^[0-9a-f]+$", core.token()) end
            assert.equal(32, #core.token())
        end)

        it("never repeats over 100k draws", function()
            local seen, n, draws = {}, 0, helper.draws(100000)
            for _ = 1, draws do
                local t = core.token()
                assert.is_nil(seen[t])
                seen[t] = true
                n = n + 1
            end
            assert.equal(draws, n)
        end)

        it("never repeats across fork(): the child draws new bytes", function()
            local build = os.getenv("REDLOCK_BUILD") or "build"
            local out = helper.read_cmd(build .. "/tests/token_fork; echo rc=$?")
            assert.matches("rc=0", out)
            local seen, n = {}, 0
            for who, t in out:gmatch("(%a+) (%x+)\n") do
                assert.is_nil(seen[t], "the " .. who .. " repeated a token after fork: " .. t)
                seen[t] = who
                n = n + 1
            end
            assert.equal(16, n)
        end)

        it("uses every hex digit in every position (not a counter, not a clock)", function()
            local digits = {}
            for _ = 1, 2000 do
                local t = core.token()
                for i = 1, 32 do
                    digits[i] = digits[i] or {}
                    digits[i][t:sub(i, i)] = true
                end
            end
            for i = 1, 32 do
                local n = 0
                for _ in pairs(digits[i]) do n = n + 1 end
                assert.equal(16, n)
            end
        end)
    end)

    describe("encode() and reader()", function()
        it("encodes binary-safe commands", function()
            assert.equal("*3\r\n$3\r\nSET\r\n$3\r\na\0b\r\n$2\r\n42\r\n", core.encode("SET", "a\0b", 42))
        end)

        it("encodes empty, long and many arguments as RESP", function()
            -- the reference: RESP written out in Lua
            local function resp(...)
                local out = { "*" .. select("#", ...) .. "\r\n" }
                for i = 1, select("#", ...) do
                    local a = tostring((select(i, ...)))
                    out[#out + 1] = "$" .. #a .. "\r\n" .. a .. "\r\n"
                end
                return table.concat(out)
            end
            local unpack = table.unpack or unpack -- luacheck: ignore 113
            local long = string.rep("x\r\n\0", 40000) -- past the stack buffer
            assert.equal(resp("SET", "", long), core.encode("SET", "", long))
            local many = {}
            for i = 1, 120 do many[i] = string.rep("a", i * 7) end
            assert.equal(resp(unpack(many)), core.encode(unpack(many)))
            -- whole numbers as digits, floats or not (a fence on 5.1, 1e3 on 5.4)
            assert.equal(resp(9, 10, 99, 100, "1000000000000000", "4503599627370497", "-3", "1.5"),
                core.encode(9, 10, 99, 100, 1e15, 2 ^ 52 + 1, -3.0, 1.5))
        end)

        it("refuses a command whose size would pass LONG_MAX, sums that wrap included", function()
            -- made-up lengths no Lua string could have: spec/c/encode_bound.c
            local build = os.getenv("REDLOCK_BUILD") or "build"
            local out = helper.read_cmd(build .. "/tests/encode_bound; echo rc=$?")
            local passed = 0
            for line in out:gmatch("[^\n]+") do
                assert.not_matches("^not ok", line)
                if line:match("^ok %d") then passed = passed + 1 end
            end
            assert.equal(5, passed)
            assert.matches("rc=0", out)
        end)

        it("the topology core decides alike for every driver (spec/c/topo_test.c, fed replies)", function()
            local build = os.getenv("REDLOCK_BUILD") or "build"
            local out = helper.read_cmd(build .. "/tests/topo_test; echo rc=$?")
            local passed = 0
            for line in out:gmatch("[^\n]+") do
                assert.not_matches("^not ok", line)
                if line:match("^ok %d") then passed = passed + 1 end
            end
            assert.equal(68, passed, out)
            assert.matches("rc=0", out)
        end)

        it("parses replies fed in pieces, nil as core.null, errors apart", function()
            local r = core.reader()
            assert.is_true(r:feed("*3\r\n:7\r\n$-1\r\n$2\r\nh"))
            assert.is_false(r:get())
            r:feed("i\r\n-ERR bad\r\n+OK\r\n")
            local t = r:get()
            assert.same({ 7, core.null, "hi" }, t)
            local v, err, code = r:get()
            assert.is_nil(v)
            assert.equal("ERR bad", err)
            assert.equal("server", code)
            assert.equal("OK", r:get())
            assert.is_false(r:get())
        end)

        it("reports a protocol error without crashing", function()
            local r = core.reader()
            r:feed("?garbage\r\n")
            local v, err, code = r:get()
            assert.is_nil(v)
            assert.matches("^protocol error", err)
            assert.equal("connection", code)
        end)

        it("raises on bad arguments", function()
            assert.has_error(function() core.encode() end)
            assert.has_error(function() core.encode("GET", {}) end)
        end)
    end)

    -- what the grant's XADD answered (conn:grant's rule, which the nginx
    -- transport reads its replies by, redlock.cosocket)
    it("grant_fence(): the fence of XADD's ID, -1 / -2 for the script's way, false and why on a failure",
        function()
        local epoch = 1767225600000
        assert.equal(1, core.grant_fence("s:1", (epoch) .. "-1"))
        assert.equal(100 * 5 + 7, core.grant_fence("s:1", (epoch + 5) .. "-7"))
        assert.equal(-1, core.grant_fence("s:1", (epoch + 5) .. "-100")) -- a seq over 99
        assert.equal(-1, core.grant_fence("s:1", nil, "WRONGTYPE Operation against a key holding the wrong kind"))
        assert.equal(-2, core.grant_fence("s:1", nil, "ERR unknown command 'XADD', with args beginning with:"))
        local f, why = core.grant_fence("s:1", nil, "NOPERM this user has no permissions to run the 'xadd' command")
        assert.is_false(f)
        assert.equal("server: s:1: NOPERM this user has no permissions to run the 'xadd' command", why)
        f, why = core.grant_fence("s:1", 5)
        assert.is_false(f)
        assert.equal("server: s:1: unexpected reply to XADD", why)
    end)

    describe("conn", function()
        it("runs commands with binary keys and values", function()
            local c = core.conn(server:spec())
            local key = "bin\0key\n" .. helper.key()
            assert.equal("OK", c:command("SET", key, "v\0\r\nv"))
            assert.equal("v\0\r\nv", c:command("GET", key))
            assert.equal(core.null, c:command("GET", key .. "missing"))
            assert.equal(1, c:command("DEL", key))
            c:close()
        end)

        it("runs commands longer than the stack argv (heap path)", function()
            local c = core.conn(server:spec())
            local k, args = helper.key(), {}
            for i = 1, 100 do args[i] = "v" .. i end
            local unpack = table.unpack or unpack -- luacheck: ignore 113
            assert.equal(100, c:command("RPUSH", k, unpack(args)))
            assert.equal("v100", c:command("LINDEX", k, -1))
            c:close()
        end)

        it("sends a value longer than the stack buffer whole", function()
            local c = core.conn(server:spec())
            local k, v = helper.key(), string.rep("0123456789\0", 30000)
            assert.equal("OK", c:command("SET", k, v))
            assert.equal(v, c:command("GET", k))
            assert.equal(1, c:command("DEL", k))
            c:close()
        end)

        it("converts arrays and nested nils", function()
            local c = core.conn(server:spec())
            local k = helper.key()
            c:command("RPUSH", k, "a", "b")
            assert.same({ "a", "b" }, c:command("LRANGE", k, 0, -1))
            c:command("SET", k .. "x", "a")
            assert.same({ "a", core.null }, c:command("MGET", k .. "x", k .. "y"))
            -- an error inside EXEC's array is a value, not a failure of the call
            assert.equal("OK", c:command("MULTI"))
            assert.equal("QUEUED", c:command("SET", k .. "z", "q"))
            assert.equal("QUEUED", c:command("INCR", k .. "z"))
            assert.same({ "OK", { err = "ERR value is not an integer or out of range" } },
                c:command("EXEC"))
            c:close()
        end)

        it("returns error replies as nil, 'server: ...', 'server'", function()
            local c = core.conn(server:spec())
            local v, err, code = c:command("NOSUCHCOMMAND")
            assert.is_nil(v)
            assert.matches("^server: 127%.0%.0%.1:%d+: ERR unknown command", err)
            assert.equal("server", code)
            assert.equal("PONG", c:command("PING")) -- the connection is still good
            c:close()
        end)

        it("has an idempotent close and says so in tostring", function()
            local c = core.conn(server:spec())
            assert.matches("redlock.conn %(127%.0%.0%.1:%d+%)", tostring(c))
            c:close()
            c:close()
            assert.equal("redlock.conn (closed)", tostring(c))
            local v, err, code = c:command("PING")
            assert.is_nil(v)
            assert.matches("^closed", err)
            assert.equal("closed", code)
        end)

        it("runs named scripts and survives SCRIPT FLUSH (NOSCRIPT)", function()
            helper.needs("scripting")
            local c = core.conn(server:spec())
            local k = helper.key()
            c:command("SET", k, "tok")
            c:command("SCRIPT", "FLUSH")
            assert.equal(0, c:eval("release", 1, k, "other"))
            assert.equal(1, c:eval("release", 1, k, "tok"))
            assert.equal(0, c:command("EXISTS", k))
            c:close()
        end)

        it("names scripts by their SHA-1", function()
            helper.needs("scripting")
            local c = core.conn(server:spec())
            for _, s in pairs(core.scripts) do
                assert.equal(s.sha, c:command("SCRIPT", "LOAD", s.source))
            end
            c:close()
        end)

        it("raises on misuse before doing any I/O", function()
            assert.has_error(function() core.conn() end)
            assert.has_error(function() core.conn({ host = 1 }) end)
            assert.has_error(function() core.conn({ host = "h", port = 70000 }) end)
            local c = core.conn(server:spec())
            assert.has_error(function() c:command() end)
            assert.has_error(function() c:command("GET", nil) end)
            assert.has_error(function() c:eval("nope", 0) end)
            assert.has_error(function() c:eval("release", 5, "k") end)
            c:close()
        end)
    end)
end)
