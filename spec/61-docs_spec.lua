-- The documents (README.md and docs/*.md) against the code: every option,
-- server field, tls field, error code and command option documented exactly
-- once and present in the code; every code block run here (```lua: a
-- complete program, ```sh: a shell script with `redlock`, against a
-- throwaway redis-server), run by another spec
-- (```x tested-by=spec/NN_spec.lua) or marked as a fragment (```x fragment);
-- no indented code blocks; every link between the documents resolves. The
-- rules are in docs/README.md ("Code blocks in these pages").
local helper = require "helper"

local function read(path)
    local f = assert(io.open(path, "rb"))
    local s = f:read("*a")
    f:close()
    return s
end

local FILES = { "README.md" }
for name in helper.read_cmd("ls docs/*.md"):gmatch("[^\n]+") do FILES[#FILES + 1] = name end

local function lines_of(text)
    local out = {}
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do out[#out + 1] = line end
    return out
end

-- Every document, parsed once: its lines, its fenced blocks (info string,
-- text, first line) and the lines outside fences.
local DOCS = {}
for _, file in ipairs(FILES) do
    local doc = { file = file, lines = lines_of(read(file)), blocks = {}, outside = {} }
    local block
    for i, line in ipairs(doc.lines) do
        local indent, info = line:match("^( *)```(.*)$")
        if block then
            if indent and info == "" then
                block.text = table.concat(block.body, "\n") .. "\n"
                doc.blocks[#doc.blocks + 1] = block
                block = nil
            else
                block.body[#block.body + 1] = line:sub(#block.indent + 1)
            end
        elseif indent then
            block = { info = info, line = i, indent = indent, body = {} }
        else
            doc.outside[i] = line
        end
    end
    assert(not block, file .. ": a fence opened at line " .. (block and block.line or 0) .. " is never closed")
    DOCS[#DOCS + 1] = doc
end

local function where(doc, i) return doc.file .. ":" .. i end

-- The first cells (`name`) of the rows of every table whose header row is
-- `header`, as { name = { "file:line", ... } }.
local function table_rows(header)
    local found = {}
    for _, doc in ipairs(DOCS) do
        local in_table = false
        for i = 1, #doc.lines do
            local line = doc.outside[i]
            if line and line == header then
                in_table = true
            elseif in_table and line and line:match("^|") then
                local name = line:match("^| `([^`]+)`")
                if name then
                    found[name] = found[name] or {}
                    table.insert(found[name], where(doc, i))
                end
            else
                in_table = false
            end
        end
    end
    return found
end

local OPTIONS_HEADER = "| option | scope | default | meaning |"

-- The cells of the rows of the tables whose header row is `header`, by
-- their first cell's name: { name = { "`name`", cell2, ... } } (trimmed).
local function table_cells(header)
    local found = {}
    for _, doc in ipairs(DOCS) do
        local in_table = false
        for i = 1, #doc.lines do
            local line = doc.outside[i]
            if line and line == header then
                in_table = true
            elseif in_table and line and line:match("^|") then
                local name = line:match("^| `([^`]+)`")
                if name then
                    local cells = {}
                    for cell in line:sub(2):gmatch("([^|]*)|") do
                        cells[#cells + 1] = (cell:gsub("^%s+", ""):gsub("%s+$", ""))
                    end
                    found[name] = cells
                end
            else
                in_table = false
            end
        end
    end
    return found
end

local function keys(...)
    local out = {}
    for _, t in ipairs({ ... }) do
        for k in pairs(t) do out[k] = true end
    end
    return out
end

-- Documented (rows) against the code (set): each exactly once, both ways.
local function same_names(what, rows, set)
    local problems = {}
    for name, at in pairs(rows) do
        if not set[name] then
            problems[#problems + 1] = string.format("%s '%s' is documented (%s) but not in the code",
                what, name, table.concat(at, ", "))
        elseif #at > 1 then
            problems[#problems + 1] = string.format("%s '%s' is documented %d times (%s)",
                what, name, #at, table.concat(at, ", "))
        end
    end
    for name in pairs(set) do
        if not rows[name] then
            problems[#problems + 1] = string.format("%s '%s' is in the code but not documented", what, name)
        end
    end
    table.sort(problems)
    assert.same({}, problems)
end

-- The error code words of the code: the list in lua/redlock.lua's header
-- ("code one of: ...; the message"), and the third value of every
-- `return nil, msg, "word"` (a line that ends with `, "word"`) under lua/.
local function header_codes()
    local header = read("lua/redlock.lua"):match("^(.-)\n[^-]")
    local list = assert(header:gsub("\n%-%-", " "):match("code one of:(.-); the message"),
        "no 'code one of: ...' in lua/redlock.lua's header")
    list = list:gsub("%b()", "")
    local out = {}
    for word in list:gmatch("[^,]+") do out[(word:gsub("^%s+", ""):gsub("%s+$", ""))] = true end
    return out
end

local function returned_codes()
    local out = {}
    for path in helper.read_cmd("find lua -name '*.lua' | sort"):gmatch("[^\n]+") do
        for line in read(path):gmatch("[^\n]+") do
            local word = line:match(', "(%l[%l ]*)"%s*$')
            if word then out[word] = true end
        end
    end
    return out
end

-- GitHub's anchors for the headings of a document.
local function anchors(doc)
    local out, seen = {}, {}
    for i = 1, #doc.lines do
        local text = doc.outside[i] and doc.outside[i]:match("^#+ (.+)$")
        if text then
            local slug = text:lower():gsub("[^%w%-_ ]", ""):gsub(" ", "-")
            local n = seen[slug] or 0
            seen[slug] = n + 1
            out[n == 0 and slug or (slug .. "-" .. n)] = true
        end
    end
    return out
end

local function dirname(path) return path:match("^(.*)/") or "." end

local function normalize(path)
    local parts = {}
    for part in path:gmatch("[^/]+") do
        if part == ".." and #parts > 0 and parts[#parts] ~= ".." then
            parts[#parts] = nil
        elseif part ~= "." then
            parts[#parts + 1] = part
        end
    end
    return table.concat(parts, "/")
end

local function exists(path)
    local f = io.open(path, "rb")
    if f then f:close() end
    return f ~= nil
end

describe("the documents", function()
    local redlock = require "redlock"
    local options = require "redlock.options"
    local addresses = require "redlock.addresses"

    it("document every option of redlock.new and of the calls once, in the options table", function()
        local code = keys(options.DEFAULTS, options.CALL, options.CLIENT)
        assert.truthy(code.renew and code.notify, "redlock did not register its per-call options")
        same_names("option", table_rows(OPTIONS_HEADER), code)
    end)

    it("state each option's scope and default in the options table as the code has them", function()
        local problems = {}
        local function literal(v)
            if type(v) == "string" then return string.format('`"%s"`', v) end
            return "`" .. tostring(v) .. "`"
        end
        for name, cells in pairs(table_cells(OPTIONS_HEADER)) do
            local scope, default = cells[2], cells[3]
            local want = options.CALL[name] and "call" or "client"
            if scope ~= want then
                problems[#problems + 1] = string.format("%s: scope '%s', the code says %s", name, scope, want)
            end
            local v = options.DEFAULTS[name]
            if v ~= nil and default ~= literal(v) then
                problems[#problems + 1] = string.format("%s: default %s, the code says %s", name, default,
                    literal(v))
            elseif v == nil and default:match("^`[%w%.\"]+`$") then
                problems[#problems + 1] = string.format("%s: default %s, the code has none", name, default)
            end
        end
        table.sort(problems)
        assert.same({}, problems)
    end)

    it("document every field of a server table and of a tls table once", function()
        same_names("server field", table_rows("| server field | type | meaning |"), addresses.SERVER_FIELDS)
        same_names("tls field", table_rows("| tls field | type | default | meaning |"), addresses.TLS_FIELDS)
    end)

    it("document every error code once, and only those the code returns", function()
        local listed, returned = header_codes(), returned_codes()
        assert.same(listed, returned, "lua/redlock.lua's header and the returns under lua/ disagree")
        same_names("error code", table_rows("| error code | meaning |"), listed)
        assert.truthy(redlock.VERSION)
    end)

    it("document every option of the redlock command once, with its variable", function()
        local args = require "redlock.cli.args"
        local rows = {}
        for _, doc in ipairs(DOCS) do
            local in_table = false
            for i = 1, #doc.lines do
                local line = doc.outside[i]
                if line == "| command option | default | meaning |" then
                    in_table = true
                elseif in_table and line and line:match("^|") then
                    local first = line:match("^|([^|]*)|") or ""
                    for name in first:gmatch("`%-%-([%w%-]+)") do
                        rows[name] = rows[name] or {}
                        table.insert(rows[name], where(doc, i))
                    end
                    for var in first:gmatch("REDLOCK_[%u_]+") do rows["$" .. var] = { where(doc, i) } end
                else
                    in_table = false
                end
            end
        end
        local code = {}
        for name, spec in pairs(args.SPECS) do
            code[name] = true
            if spec[3] then
                assert.truthy(rows["$" .. spec[3]], "--" .. name .. ": " .. spec[3] .. " is not documented")
            end
        end
        local names = {}
        for k, v in pairs(rows) do
            if k:sub(1, 1) ~= "$" then names[k] = v end
        end
        same_names("command option", names, code)
    end)

    it("run, hand to another spec, or mark as a fragment every code block", function()
        local problems = {}
        local n = 0
        for _, doc in ipairs(DOCS) do
            for _, block in ipairs(doc.blocks) do
                local lang, rest = block.info:match("^(%S*)%s*(.*)$")
                local at = where(doc, block.line)
                local by = rest:match("tested%-by=(%S+)")
                if rest:match("^fragment") then
                    if lang == "lua" and _VERSION == "Lua 5.4" then
                        local ok, err = load(block.text, "=" .. at)
                        if not ok then problems[#problems + 1] = at .. ": the fragment does not compile: " .. err end
                    end
                elseif by then
                    local spec_text = exists(by) and read(by)
                    if not (spec_text and spec_text:find(doc.file, 1, true)) then
                        problems[#problems + 1] = at .. ": " .. by .. " does not read " .. doc.file
                    end
                elseif (lang == "lua" or lang == "sh") and rest == "" then
                    n = n + 1
                else
                    problems[#problems + 1] = at .. ": ```" .. block.info
                        .. ": neither lua or sh (run), 'fragment' nor 'tested-by=FILE'"
                end
            end
        end
        assert.same({}, problems)
        assert.truthy(n >= 1, "no runnable block: the README's synopsis should be one")
    end)

    it("use no indented code blocks (fence them, and say what they are)", function()
        local problems = {}
        for _, doc in ipairs(DOCS) do
            for i = 2, #doc.lines do
                local line = doc.outside[i]
                if line and doc.lines[i - 1] == "" and line:match("^    %S") then
                    problems[#problems + 1] = where(doc, i) .. ": " .. line
                end
            end
        end
        assert.same({}, problems)
    end)

    it("link to documents and headings that exist, and docs/README.md lists every page", function()
        local by_file, problems = {}, {}
        for _, doc in ipairs(DOCS) do by_file[doc.file] = doc end
        for _, doc in ipairs(DOCS) do
            for i = 1, #doc.lines do
                local line = doc.outside[i]
                for target in (line or ""):gmatch("%]%(([^%)%s]+)%)") do
                    if not target:match("^%a[%w+.-]*:") then
                        local path, frag = target:match("^([^#]*)#?(.*)$")
                        local full = path == "" and doc.file or normalize(dirname(doc.file) .. "/" .. path)
                        if not exists(full) then
                            problems[#problems + 1] = where(doc, i) .. ": " .. target .. ": no " .. full
                        elseif frag ~= "" and full:match("%.md$") then
                            local other = by_file[full]
                            other.anchors = other.anchors or anchors(other)
                            if not other.anchors[frag] then
                                problems[#problems + 1] = where(doc, i) .. ": " .. target .. ": no such heading"
                            end
                        end
                    end
                end
            end
        end
        local index = read("docs/README.md")
        for _, doc in ipairs(DOCS) do
            local name = doc.file:match("^docs/(.+)$")
            if name and name ~= "README.md" and not index:find("](" .. name .. ")", 1, true) then
                problems[#problems + 1] = "docs/README.md does not list " .. name
            end
        end
        assert.same({}, problems)
    end)

    it("keep the README a one-minute read: at most 130 lines, `make test` within the first 90,"
        .. " and docs/benchmarks.md at most 300", function()
        local readme, bench
        for _, doc in ipairs(DOCS) do
            if doc.file == "README.md" then readme = doc end
            if doc.file == "docs/benchmarks.md" then bench = doc end
        end
        -- (the last line ends with a newline: lines_of counts one empty line more)
        assert.truthy(#readme.lines - 1 <= 130, "README.md has " .. (#readme.lines - 1) .. " lines")
        local at
        for i = 1, 90 do
            if (readme.lines[i] or ""):find("make test", 1, true) then at = i break end
        end
        assert.truthy(at, "README.md does not show `make test` in its first 90 lines")
        assert.truthy(#bench.lines - 1 <= 300, "docs/benchmarks.md has " .. (#bench.lines - 1) .. " lines")
    end)

    describe("complete programs", function()
        local server
        setup(function() server = helper.start_server() end)
        teardown(function() helper.stop_all() end)

        -- a ```sh block: a shell script whose `redlock` is bin/redlock under
        -- the suite's Lua and build, REDLOCK_SERVERS the throwaway server
        local lua = os.getenv("REDLOCK_LUA") or "lua5.4"
        local build = os.getenv("REDLOCK_BUILD") or "build"
        local repo = helper.read_cmd("pwd"):gsub("%s+$", "")

        for _, doc in ipairs(DOCS) do
            for _, block in ipairs(doc.blocks) do
                if block.info == "sh" then
                    it(where(doc, block.line) .. " runs and exits 0", function()
                        local dir = helper.fresh_dir("docblock")
                        local path = dir .. "/block.sh"
                        local f = assert(io.open(path, "wb"))
                        f:write(string.format("set -eu\nexport REDLOCK_SERVERS=%s REDLOCK_BUILD=%s\n"
                            .. "redlock() { %s %s/bin/redlock \"$@\"; }\n",
                            helper.quote(server:url()), helper.quote(build), lua, helper.quote(repo)))
                        f:write((block.text:gsub("redis://127%.0%.0%.1:6379", server:url())))
                        f:close()
                        local out = helper.read_cmd("cd " .. helper.quote(dir) .. " && sh " .. path
                            .. " 2>&1; echo \"exit=$?\"")
                        assert.matches("exit=0%s*$", out)
                    end)
                elseif block.info == "lua" then
                    it(where(doc, block.line) .. " runs and exits 0", function()
                        local dir = helper.fresh_dir("docblock")
                        local path = dir .. "/block.lua"
                        local f = assert(io.open(path, "wb"))
                        f:write((block.text:gsub("redis://127%.0%.0%.1:6379", server:url())))
                        f:close()
                        local status, out = helper.spawn(path):wait(60000)
                        assert.equal(0, status, out)
                    end)
                end
            end
        end
    end)
end)
