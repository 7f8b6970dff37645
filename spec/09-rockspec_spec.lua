-- The rockspec installs every module of the tree and every C source: a file
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
    local modules = spec.build.modules

    it("lists every Lua module under lua/", function()
        local listed = {}
        for name, path in pairs(modules) do
            if type(path) == "string" then listed[path] = name end
        end
        for path in helper.read_cmd("cd lua && find . -name '*.lua' | sort"):gmatch("[^\n]+") do
            path = "lua/" .. path:gsub("^%./", "")
            local name = path:gsub("^lua/", ""):gsub("%.lua$", ""):gsub("/", ".")
            assert.equal(name, listed[path], path .. " is not in the rockspec")
        end
    end)

    it("builds redlock.core from every C file under csrc/", function()
        local sources = {}
        for _, s in ipairs(modules["redlock.core"].sources) do sources[s] = true end
        for path in helper.read_cmd("ls csrc/*.c"):gmatch("[^\n]+") do
            assert.is_true(sources[path], path .. " is not in the rockspec")
        end
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
            io.write(r.VERSION, " ", #r.token())]]) .. " 2>&1")
        assert.matches("^%d+%.%d+%.%d+ 32$", out)
        out = helper.read_cmd(env .. q(tree .. "/bin/redlock") .. " --help 2>&1; echo rc=$?")
        assert.matches("rc=0", out)
        assert.matches("redlock run", out)
    end)
end)
