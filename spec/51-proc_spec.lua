-- core.proc: the child processes of the redlock command, on their own.
local helper = require "helper"
local core = require "redlock.core"

local proc = core.proc

local function read(path)
    local f = io.open(path)
    if not f then return nil end
    local s = f:read("*a")
    f:close()
    return s
end

-- Runs argv with stdout in a file; returns how, value, output.
local function run(argv, opts, limit)
    local dir = helper.fresh_dir("proc")
    local full = { "sh", "-c", 'exec >"$0/out" 2>&1; exec "$@"', dir }
    for _, a in ipairs(argv) do full[#full + 1] = a end
    local pid = assert(proc.spawn(full, opts))
    local how, v = proc.wait(pid, limit or 10000)
    return how, v, read(dir .. "/out")
end

describe("core.proc", function()
    it("spawns, waits and passes the exit status", function()
        local function outcome(...)
            local how, v = run(...)
            return { how, v }
        end
        assert.same({ "exit", 0 }, outcome({ "true" }))
        assert.same({ "exit", 3 }, outcome({ "sh", "-c", "exit 3" }))
        assert.same({ "signal", 9 }, outcome({ "sh", "-c", "kill -KILL $$" }))
    end)

    it("adds to the environment, overriding, keeping the rest", function()
        local _, _, out = run({ "sh", "-c", 'echo "$A|$HOME|${PATH:+path}"' },
            { env = { A = "one two", HOME = "/nowhere" } })
        assert.equal("one two|/nowhere|path\n", out)
        assert.not_equal("/nowhere", os.getenv("HOME")) -- ours is untouched
    end)

    it("gives the child an empty signal mask (Linux: /proc)", function()
        if not io.open("/proc/self/status") then return end
        -- grep's own mask, which it got from our child through exec (a
        -- shell's $$ was racy: dash blocks every signal for a moment while
        -- it waits for the command it forked)
        local _, _, out = run({ "grep", "SigBlk", "/proc/self/status" })
        assert.matches("^SigBlk:%s+0+\n$", out)
    end)

    it("says why a command cannot run", function()
        local pid, err, why = proc.spawn({ "no-such-command-here" })
        assert.is_nil(pid)
        assert.equal("not found", why)
        assert.equal("cannot run 'no-such-command-here': No such file or directory", err)
        pid, err, why = proc.spawn({ "/" })
        assert.is_nil(pid)
        assert.equal("cannot execute", why)
        assert.matches("^cannot run '/': ", err)
    end)

    it("wait returns false while the child runs; kill ends it", function()
        local pid = assert(proc.spawn({ "sleep", "30" }))
        local t0 = core.now()
        assert.is_false(proc.wait(pid, 200))
        assert.is_true(core.now() - t0 >= 190)
        assert.is_false(proc.wait(pid))
        assert.is_true(proc.kill(pid, "TERM"))
        assert.same({ "signal", 15 }, { proc.wait(pid, 5000) })
        local ok, err = proc.kill(pid, "TERM")
        assert.is_nil(ok)
        assert.matches("^cannot signal process %d+: ", err)
        assert.equal(15, proc.signals.TERM)
    end)

    it("raises on misuse before starting anything", function()
        assert.has_error(function() proc.spawn({}) end)
        assert.has_error(function() proc.spawn({ "echo", 1 }) end)
        assert.has_error(function() proc.spawn({ "echo\0x" }) end)
        assert.has_error(function() proc.spawn({ "true" }, { env = { ["A=B"] = "x" } }) end)
        assert.has_error(function() proc.spawn({ "true" }, { env = { A = 1 } }) end)
        assert.has_error(function() proc.spawn({ "true" }, { env = "A=1" }) end)
        assert.has_error(function() proc.kill(1, "NOPE") end)
        assert.has_error(function() proc.wait(0) end)
    end)

    it("trap: a caught signal is remembered and forwarded to the child", function()
        -- in a worker process: trapping here would change the test runner
        local script = helper.fresh_dir("trap") .. "/w.lua"
        local f = assert(io.open(script, "w"))
        f:write([[
            local proc = require("redlock.core").proc
            proc.trap()
            local pid = assert(proc.spawn({ "sleep", "30" }))
            os.execute("kill -TERM $PPID") -- $PPID of that sh: this worker
            print(proc.caught(), proc.wait(pid, 5000))
        ]])
        f:close()
        local status, out = helper.spawn(script):wait(20000)
        assert.equal(0, status, out)
        assert.equal("15\tsignal\t15\n", out)
    end)
end)
