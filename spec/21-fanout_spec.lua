-- The C fan-out (csrc/drivers/fanout.c): one command to several servers at once.
local helper = require "helper"
local core = require "redlock.core"

describe("core.fanout", function()
    local servers, conns = {}, {}

    local function fresh_conns(extra)
        local list = {}
        for i, s in ipairs(servers) do list[i] = core.conn(s:spec(extra)) end
        return list
    end

    setup(function()
        for i = 1, 3 do servers[i] = helper.start_server() end
        conns = fresh_conns()
    end)
    teardown(function()
        for _, c in ipairs(conns) do c:close() end
        helper.stop_all()
    end)

    local function thaw_all()
        for _, s in ipairs(servers) do s:thaw() end
    end

    it("returns each server's reply by position", function()
        local key = helper.key()
        for i, c in ipairs(conns) do c:command("SET", key, "v" .. i) end
        local values, errs, codes, flags = core.fanout(conns, 1000, "GET", key)
        assert.same({ "v1", "v2", "v3" }, values)
        assert.same({}, errs)
        assert.same({}, codes)
        assert.same({}, flags)
    end)

    it("writes every request before reading: frozen servers cost one timeout, not the sum", function()
        finally(thaw_all)
        local extra = helper.start_server()
        local list = fresh_conns()
        list[4] = core.conn(extra:spec())
        assert.equal(4, #core.fanout(list, 1000, "PING")) -- connected
        for i = 1, 3 do servers[i]:freeze() end
        local t0 = core.now()
        local values, errs, codes, flags = core.fanout(list, 400, "PING")
        local took = core.now() - t0
        assert.is_true(took >= 390 and took < 1000, "took " .. took) -- one by one: 1200 ms
        assert.equal("PONG", values[4])
        for i = 1, 3 do
            assert.is_nil(values[i])
            assert.equal("connection", codes[i])
            assert.equal("timeout", flags[i])
            assert.matches("^connection: 127%.0%.0%.1:%d+: timed out after 400 ms waiting for a reply$",
                errs[i])
            assert.is_false(list[i]:connected()) -- dropped, so its late reply is never read
        end
        for _, c in ipairs(list) do c:close() end
        extra:stop()
    end)

    it("gives a connection made in the call twice the time (its handshake is one more round trip)", function()
        finally(thaw_all)
        local c = core.conn(servers[1]:spec())
        servers[1]:freeze() -- the kernel still completes the TCP handshake
        local t0 = core.now()
        local _, errs, _, flags = core.fanout({ c }, 150, "PING")
        local took = core.now() - t0
        assert.equal("timeout", flags[1])
        assert.matches("timed out after 300 ms", errs[1])
        assert.is_true(took >= 290 and took < 1000, "took " .. took)
        c:close()
    end)

    it("never takes a late reply for the answer to the next request", function()
        finally(thaw_all)
        local list = fresh_conns()
        core.fanout(list, 1000, "PING")
        servers[1]:freeze()
        local values = core.fanout(list, 100, "ECHO", "first")
        assert.is_nil(values[1])
        servers[1]:thaw()
        helper.sleep(50)
        values = core.fanout(list, 1000, "ECHO", "second")
        assert.same({ "second", "second", "second" }, values)
        for _, c in ipairs(list) do c:close() end
    end)

    it("connects without blocking, with AUTH and SELECT, and leaves the connection fit for conn:command",
        function()
            local s = helper.start_server { password = "s3cret" }
            finally(function() s:thaw(); s:stop() end)
            local c = core.conn(s:spec { password = "s3cret", db = 3, timeout = 300 })
            local key = helper.key()
            local values = core.fanout({ c }, 1000, "SET", key, "in-db-3")
            assert.equal("OK", values[1])
            assert.equal("in-db-3", s:cli("-n", "3", "GET", key))
            assert.equal("", s:cli("-n", "0", "GET", key))
            assert.equal("in-db-3", c:command("GET", key)) -- blocking use, same socket
            s:freeze()
            local t0 = core.now()
            local v, err, code = c:command("PING")
            assert.is_nil(v)
            assert.equal("connection", code)
            assert.matches("timed out after 300 ms", err)
            assert.is_true(core.now() - t0 < 2000) -- its own timeout applies: no hang
            c:close()
        end)

    it("reports a failed AUTH as a server error, without the password, and drops the connection", function()
        local s = helper.start_server { password = "right" }
        finally(function() s:stop() end)
        local c = core.conn(s:spec { password = "wrong-pass" })
        local values, errs, codes = core.fanout({ c }, 1000, "PING")
        assert.is_nil(values[1])
        assert.equal("server", codes[1])
        assert.matches("^server: 127%.0%.0%.1:%d+: AUTH failed: ", errs[1])
        assert.is_nil(errs[1]:find("wrong-pass", 1, true))
        assert.is_false(c:connected())
        c:close()
    end)

    it("gives a server's error reply as a server error for that server only", function()
        local key = helper.key()
        conns[2]:command("SET", key, "not a number")
        local values, errs, codes = core.fanout(conns, 1000, "INCR", key)
        assert.equal(1, values[1])
        assert.equal(1, values[3])
        assert.is_nil(values[2])
        assert.equal("server", codes[2])
        assert.matches("^server: 127%.0%.0%.1:%d+: ERR value is not an integer", errs[2])
    end)

    it("sends once more on a fresh connection when the server closed the idle one, and fails a dead server at once", function()
        local s = helper.start_server()
        local c = core.conn(s:spec())
        assert.equal("PONG", core.fanout({ c }, 1000, "PING")[1])
        s:cli("CLIENT", "KILL", "TYPE", "normal") -- the idle connection, closed by the server
        local values, errs, _, flags = core.fanout({ c }, 1000, "PING")
        assert.equal("PONG", values[1], errs[1])
        assert.is_nil(flags[1])
        s:kill()
        local t0 = core.now()
        local codes
        values, errs, codes, flags = core.fanout({ c }, 1000, "PING")
        assert.is_true(core.now() - t0 < 500)
        assert.is_nil(values[1])
        assert.equal("connection", codes[1])
        assert.matches("could not connect", errs[1])
        assert.is_nil(flags[1])
        c:close()
    end)


    it("works over unix sockets, and with replies larger than one read", function()
        local list = {}
        for i, s in ipairs(servers) do list[i] = core.conn { path = s.socket } end
        local key, big = helper.key(), string.rep("x", 100000)
        assert.same({ "OK", "OK", "OK" }, core.fanout(list, 2000, "SET", key, big))
        local values = core.fanout(list, 2000, "GET", key)
        for i = 1, 3 do assert.equal(big, values[i]) end
        for _, c in ipairs(list) do c:close() end
    end)

    it("fanout_eval runs a named script, with one EVAL where the server answers NOSCRIPT", function()
        local key = helper.key()
        conns[2]:command("SCRIPT", "FLUSH")
        local values = core.fanout_eval(conns, 1000, "acquire", 2, key, "redlock:fences", "tok", 5000)
        for i = 1, 3 do
            assert.equal(1, values[i][1])
            assert.is_true(values[i][2] > 2 ^ 40) -- a fence: ms since 2026, x 100
        end
        values = core.fanout_eval(conns, 1000, "release", 1, key, "tok")
        assert.same({ 1, 1, 1 }, values)
    end)

    it("gives 'closed' for a closed conn and still asks the others", function()
        local list = fresh_conns()
        list[2]:close()
        local values, errs, codes = core.fanout(list, 1000, "PING")
        assert.equal("PONG", values[1])
        assert.equal("PONG", values[3])
        assert.equal("closed", codes[2])
        assert.matches("^closed", errs[2])
        for _, c in ipairs(list) do c:close() end
    end)

    it("raises on misuse before doing anything", function()
        local c = conns[1]
        assert.has_error(function() core.fanout(nil, 10, "PING") end)
        assert.has_error(function() core.fanout({}, 10, "PING") end)
        assert.has_error(function() core.fanout({ c, "x" }, 10, "PING") end)
        assert.has_error(function() core.fanout({ c, c }, 10, "PING") end)
        assert.has_error(function() core.fanout({ c }, 0, "PING") end)
        assert.has_error(function() core.fanout({ c }, 10) end)
        assert.has_error(function() core.fanout({ c }, 10, "GET", {}) end)
        assert.has_error(function() core.fanout_eval({ c }, 10, "nope", 0) end)
        assert.has_error(function() core.fanout_eval({ c }, 10, "release", 2, "k") end)
        local many = {}
        for i = 1, 65 do many[i] = core.conn { host = "127.0.0.1", port = 1 } end
        assert.has_error(function() core.fanout(many, 10, "PING") end)
    end)
end)
