-- The rockspec installs every module of the tree, and the core the Makefile
-- builds (every C source, the Redis scripts of scripts/ embedded): a file
-- added without a rockspec line would work in the tree and be missing once
-- installed with luarocks.
local helper = require "helper"

local function load_rockspec()
    local env = {}
    local f = assert(loadfile("redlock-scm-1.rockspec", "t", env))
    if setfenv then setfenv(f, env) end -- luacheck: ignore 113 (Lua 5.1)
    f()
    return env
end

describe("redlock-scm-1.rockspec", function()
    local spec = load_rockspec()
    local modules = spec.build.install.lua

    it("lists every Lua module under lua/", function()
        local listed = {}
        for name, path in pairs(modules) do listed[path] = name end
        for path in helper.read_cmd("cd lua && find . -name '*.lua' | sort"):gmatch("[^\n]+") do
            path = "lua/" .. path:gsub("^%./", "")
            local name = path:gsub("^lua/", ""):gsub("%.lua$", ""):gsub("/", ".")
            assert.equal(name, listed[path], path .. " is not in the rockspec")
        end
    end)

    it("installs the core the Makefile builds (every C file under csrc/)", function()
        assert.equal("make", spec.build.type)
        assert.equal(spec.build.build_target, spec.build.install.lib["redlock.core"])
        local f = assert(io.open("Makefile"))
        local makefile = f:read("*a")
        f:close()
        assert.matches("\nSRCS%s*:= %$%(wildcard csrc/%*%.c%)", makefile)
    end)

    it("installs the redlock command", function()
        assert.equal("bin/redlock", spec.build.install.bin.redlock)
    end)

    it("luarocks make installs a module that loads, and a redlock command that runs", function()
        local tree = helper.fresh_dir("rocktree")
        local q = helper.quote
        local out = helper.read_cmd(string.format(
            "env -u LD_PRELOAD luarocks --lua-version 5.4 make --tree %s redlock-scm-1.rockspec 2>&1; echo rc=$?",
            q(tree)))
        assert.matches("rc=0", out)
        local env = string.format("env -u LD_PRELOAD LUA_PATH=%s LUA_CPATH=%s ",
            q(tree .. "/share/lua/5.4/?.lua;" .. tree .. "/share/lua/5.4/?/init.lua"),
            q(tree .. "/lib/lua/5.4/?.so"))
        out = helper.read_cmd(env .. "lua5.4 -e " .. q([[
            local r = require "redlock"
            assert(package.searchpath("redlock.core", package.cpath):find("rocktree", 1, true))
            local names = {}
            for name, s in pairs(require("redlock.core").scripts) do
                assert(#s.sha == 40 and #s.source > 0, name)
                names[#names + 1] = name
            end
            table.sort(names)
            io.write(r.VERSION, " ", #r.token(), " ", table.concat(names, " "))]]) .. " 2>&1")
        -- every script of scripts/ is in the installed core
        local names = helper.read_cmd("cd scripts && LC_ALL=C ls *.lua"):gsub("%.lua\n", " "):gsub(" $", "")
        assert.matches("^%d+%.%d+%.%d+ 32 ", out)
        assert.equal(names, out:match("^%S+ 32 (.*)$"))
        out = helper.read_cmd(env .. q(tree .. "/bin/redlock") .. " --help 2>&1; echo rc=$?")
        assert.matches("rc=0", out)
        assert.matches("redlock run", out)
    end)
end)
