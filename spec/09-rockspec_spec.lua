-- The rockspec installs every module of the tree, and the core the Makefile
-- builds (every C source, the Redis scripts of scripts/ embedded): a file
-- added without a rockspec line would work in the tree and be missing once
-- installed with luarocks. The release's rockspec (redlock-VERSION-1) says
-- the same as the scm one; `make dist` packs it into a source rock that
-- installs by name, offline, and runs the README's synopsis.
local helper = require "helper"

local function read(path)
    local f = assert(io.open(path, "rb"))
    local s = f:read("*a")
    f:close()
    return s
end

local function load_rockspec(path)
    local env = {}
    local f = assert(loadfile(path or "redlock-scm-1.rockspec", "t", env))
    if setfenv then setfenv(f, env) end -- luacheck: ignore 113 (Lua 5.1)
    f()
    return env
end

-- redlock.VERSION, read from its one place without loading the module
local VERSION = read("lua/redlock.lua"):match('\n%s*VERSION = "([%d.]+)",')
local RELEASE = "redlock-" .. tostring(VERSION) .. "-1.rockspec"

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
        -- (csrc/ and each layer's folder of it, every one on the list)
        assert.matches("\nSRCS%s*:= %$%(foreach d,%$%(CSRC_DIRS%),%$%(wildcard %$%(d%)/%*%.c%)%)", makefile)
        local dirs = makefile:match("\nCSRC_DIRS%s*:= ([^\n]+)")
        local listed = {}
        for d in dirs:gmatch("%S+") do listed[d] = true end
        local p = io.popen("find csrc -type d")
        for d in p:lines() do assert(listed[d], d .. " is not in CSRC_DIRS") end
        p:close()
    end)

    it("installs the redlock command", function()
        assert.equal("bin/redlock", spec.build.install.bin.redlock)
    end)

    -- (the rock is built and loaded for Lua 5.4 whatever runs busted)
    local other = helper.lua54_only("luarocks make's specs")
    if other then
        pending("luarocks make skipped: " .. other)
        return
    end

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

    describe("the release", function()
        it("has a rockspec named by redlock.VERSION that says what the scm one says", function()
            assert.matches("^%d+%.%d+%.%d+$", VERSION)
            assert.equal(VERSION, require("redlock").VERSION)
            local release = load_rockspec(RELEASE)
            assert.equal(VERSION .. "-1", release.version)
            assert.equal("redlock-" .. VERSION .. ".tar.gz", release.source.url)
            for _, field in ipairs { "package", "rockspec_format", "description", "dependencies",
                "external_dependencies", "build" } do
                assert.same(spec[field], release[field], field)
            end
        end)

        it("depends on nothing but Lua (the C libraries are external: Debian's)", function()
            for _, dep in ipairs(spec.dependencies) do assert.matches("^lua[%s<>=~]", dep) end
            assert.truthy(spec.external_dependencies.HIREDIS and spec.external_dependencies.OPENSSL)
        end)

        it("is what the README's install line names", function()
            assert.truthy(read("README.md"):find("luarocks --lua-version 5.4 make " .. RELEASE, 1, true),
                "README.md does not say: luarocks --lua-version 5.4 make " .. RELEASE)
        end)

        it("make dist packs a source rock that luarocks installs by name into an empty tree, offline and"
            .. " without pkg-config, and the README's synopsis runs with it", function()
            local q = helper.quote
            local dist, tree, bin = helper.fresh_dir("dist"), helper.fresh_dir("tree"), helper.fresh_dir("bin")
            -- without the sanitizer runtimes: git and luarocks leak, and ASan aborts them
            local out = helper.read_cmd("env -u LD_PRELOAD sh tools/dist.sh " .. q(dist) .. " 2>&1; echo rc=$?")
            assert.matches("rc=0", out, 1, true)
            assert.truthy(io.open(dist .. "/redlock-" .. VERSION .. "-1.src.rock"), out)
            -- /usr/bin but pkg-config; no proxy answers (port 9); only DIST as a rocks server.
            -- --lua-dir: luarocks would take Lua's prefix from where lua5.4 is found, BIN
            helper.read_cmd(string.format("for f in /usr/bin/*; do case ${f##*/} in "
                .. "*pkg-config*|*pkgconf*) ;; *) ln -s \"$f\" %s/ ;; esac; done", bin))
            local env = string.format("env -u LD_PRELOAD PATH=%s http_proxy=http://127.0.0.1:9 "
                .. "https_proxy=http://127.0.0.1:9 ", q(bin))
            out = helper.read_cmd(string.format("%s sh -c 'command -v pkg-config || echo no-pkg-config; "
                .. "luarocks --lua-version 5.4 --lua-dir /usr install --tree %s --only-server=%s redlock %s 2>&1;"
                .. " echo rc=$?'", env, q(tree), q(dist), VERSION))
            assert.matches("no%-pkg%-config", out)
            assert.matches("rc=0", out, 1, true)
            assert.matches("redlock " .. VERSION:gsub("%.", "%%.") .. "%-1 is now installed", out)

            -- the synopsis, as the README has it, with the paths `luarocks path` gives
            local synopsis = read("README.md"):match("\n## Synopsis\n.-```lua\n(.-)```")
            assert.truthy(synopsis, "no ```lua block under the README's Synopsis")
            local server = helper.start_server()
            local dir = helper.fresh_dir("synopsis")
            local f = assert(io.open(dir .. "/synopsis.lua", "wb"))
            f:write("assert(package.searchpath('redlock.core', package.cpath):find(" .. string.format("%q", tree)
                .. ", 1, true))\n", (synopsis:gsub("redis://127%.0%.0%.1:6379", server:url())))
            f:close()
            out = helper.read_cmd(string.format("cd %s && env -u LD_PRELOAD -u LUA_PATH -u LUA_CPATH sh -c "
                .. "'eval \"$(luarocks --lua-version 5.4 path --tree %s)\" && lua5.4 synopsis.lua' 2>&1;"
                .. " echo rc=$?", q(dir), tree))
            assert.matches("rc=0%s*$", out)
            assert.matches("building the report", out, 1, true)
            helper.stop_all()
        end)
    end)
end)
