-- The Redis scripts are scripts/NAME.lua, embedded at build time by
-- tools/embed.sh (docs/development.md, The Redis scripts): the core holds
-- exactly those scripts, each the text of its composed file less its
-- comments; the embedder's includes, constants and C escapes, and its
-- refusals.
local helper = require "helper"
local core = require "redlock.core"

local q = helper.quote
local NO_PRELOAD = "env -u LD_PRELOAD "
local BUILD = os.getenv("REDLOCK_BUILD") or "build"

local function read(path)
    local f = assert(io.open(path, "rb"))
    local s = f:read("*a")
    f:close()
    return s
end

local function write(path, text)
    local f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
end

-- runs tools/embed.sh on `files` (name -> text) under a fresh dir;
-- returns the dir, its output and "rc=N"
local function embed(files)
    local dir = helper.fresh_dir("embed")
    assert(os.execute("mkdir -p " .. q(dir .. "/s/parts")))
    for name, text in pairs(files) do write(dir .. "/s/" .. name, text) end
    local out = helper.read_cmd(string.format(
        "%stimeout 20 sh tools/embed.sh %s %s 2>&1; echo rc=$?", NO_PRELOAD, q(dir .. "/out"), q(dir .. "/s")))
    return dir, out
end

describe("the Redis scripts", function()
    it("are in the core, one per scripts/NAME.lua, each its composed file without comments", function()
        local names = {}
        for f in helper.read_cmd("cd scripts && LC_ALL=C ls *.lua"):gmatch("(%S+)%.lua") do
            names[#names + 1] = f
        end
        local loaded = {}
        for name, s in pairs(core.scripts) do
            loaded[#loaded + 1] = name
            assert.equal(40, #s.sha)
            -- the text Redis gets: the composed file's lines that are
            -- neither blank nor only a comment, less the --@define tags
            local want = {}
            for line in read(BUILD .. "/gen/scripts/" .. name .. ".lua"):gmatch("([^\n]*)\n") do
                if not (line:match("^%s*$") or line:match("^%s*%-%-")) then
                    want[#want + 1] = (line:gsub("%s+%-%-@define%s+[%w_]+$", "")) .. "\n"
                end
            end
            assert.equal(table.concat(want), s.source, name)
        end
        table.sort(loaded)
        assert.same(names, loaded)
    end)

    it("embed.sh: parts included as they are, comments and blank lines left out, constants for C", function()
        local dir, out = embed({
            ["b.lua"] = "-- a doc line\n\nlocal x = 1 --@define X_CONST\n  --@include parts/p.lua\nreturn x + y\n",
            ["parts/p.lua"] = "-- what it needs\n--@include parts/r.lua\n  local y = x\n",
            ["parts/r.lua"] = "x = x + 0\n",
            ["a.lua"] = 'return "a\\\\b?\t\\"q\\"" -- ??( trigraph\n--@include parts/r.lua\n',
        })
        assert.matches("rc=0", out)
        write(dir .. "/t.c", '#include <stdio.h>\n#include "scripts_gen.h"\n'
            .. 'int main(void) { printf("%lld|%s|%s", X_CONST, REDLOCK_SCRIPT_A, REDLOCK_SCRIPT_B);\n'
            .. '    { struct { const char *n, *s, *h; } l[] = { REDLOCK_SCRIPT_LIST };\n'
            .. '      printf("|%s %s %d", l[0].n, l[1].n, (int)(sizeof l / sizeof l[0])); }\n'
            .. '    return 0; }\n')
        out = helper.read_cmd(string.format("%scc -std=c99 -Wall -Wextra -Werror -pedantic -I%s -o %s %s 2>&1 && %s",
            NO_PRELOAD, q(dir .. "/out"), q(dir .. "/t"), q(dir .. "/t.c"), q(dir .. "/t")))
        assert.equal('1|return "a\\\\b?\t\\"q\\"" -- ??( trigraph\nx = x + 0\n'
            .. "|local x = 1\nx = x + 0\n  local y = x\nreturn x + y\n|a b 2", out)
        -- the composed copy keeps the comments and marks the parts
        assert.equal("-- a doc line\n\nlocal x = 1 --@define X_CONST\n-- >> parts/p.lua\n-- what it needs\n"
            .. "-- >> parts/r.lua\nx = x + 0\n-- << parts/r.lua\n  local y = x\n-- << parts/p.lua\nreturn x + y\n",
            read(dir .. "/out/scripts/b.lua"))
    end)

    it("embed.sh refuses a part included inside itself, a missing part, a long comment", function()
        local _, out = embed({ ["a.lua"] = "--@include parts/x.lua\n",
            ["parts/x.lua"] = "--@include parts/y.lua\n", ["parts/y.lua"] = "--@include parts/x.lua\n" })
        assert.matches("includes [^\n]*parts/x%.lua inside itself\nrc=1", out)
        _, out = embed({ ["a.lua"] = "--@include parts/none.lua\nreturn 1\n" })
        assert.matches("cannot read [^\n]*parts/none%.lua\nrc=1", out)
        _, out = embed({ ["a.lua"] = "--[[ doc\n]]\nreturn 1\n" })
        assert.matches("a%.lua:1: a long comment[^\n]*\nrc=1", out)
        _, out = embed({ ["a.lua"] = "local x = 1 --@define A\nreturn x\n", ["b.lua"] = "local x = 2 --@define A\n" })
        assert.matches("A defined twice\nrc=1", out)
    end)
end)
