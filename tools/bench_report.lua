-- Writes the current figures (bench/figures/NAME.tsv, kept by
-- tools/bench-report.sh) between the markers of README.md and
-- docs/benchmarks.md:
--   <!-- bench-report:summary begin --> ... <!-- bench-report:summary end -->
--     README.md: the headline targets; docs/benchmarks.md: every target
--   <!-- bench-report:tables begin --> ... <!-- bench-report:tables end -->
--     docs/benchmarks.md: every benchmark's tables
-- each with the command, the commit, the date and the machine.
-- usage: lua tools/bench_report.lua NAME...   (the benchmarks, in order)
local format, concat = string.format, table.concat

local function read(path)
    local f = io.open(path, "rb")
    if not f then return nil end
    local s = f:read("*a")
    f:close()
    return s
end

local function split(line)
    local t = {}
    for field in (line .. "\t"):gmatch("([^\t]*)\t") do t[#t + 1] = field end
    return t
end

-- every benchmark's figures: meta, tables (in order, rows merged by id), targets
local targets, tables, by_id, missing = {}, {}, {}, {}
for _, name in ipairs(arg) do
    local text = read("bench/figures/" .. name .. ".tsv")
    if not text then
        missing[#missing + 1] = name
    else
        local meta = {}
        for line in text:gmatch("[^\n]+") do
            local f = split(line)
            if f[1] == "meta" then
                meta[f[2]] = f[3]
            elseif f[1] == "target" then
                targets[#targets + 1] = { headline = f[2] == "1", what = f[3], figure = f[4], limit = f[5],
                    met = f[6], meta = meta, from = name }
            elseif f[1] == "table" then
                if not by_id[f[2]] then
                    local t = { id = f[2], caption = f[3], header = { table.unpack(f, 4) }, rows = {},
                        metas = {} }
                    by_id[f[2]], tables[#tables + 1] = t, t
                end
                local t = by_id[f[2]]
                if t.metas[#t.metas] ~= meta then t.metas[#t.metas + 1] = meta end
            elseif f[1] == "row" then
                local t = assert(by_id[f[2]], name .. ": a row of table " .. f[2] .. " before its header")
                t.rows[#t.rows + 1] = { table.unpack(f, 3) }
            else
                error(name .. ": a line of no known kind: " .. line)
            end
        end
    end
end

local function cell(s) return (tostring(s):gsub("|", "\\|")) end

local function markdown(header, rows)
    local out = { "| " .. concat(header, " | ") .. " |" }
    local sep = {}
    for i = 1, #header do sep[i] = i == 1 and "---" or "---:" end
    out[#out + 1] = "| " .. concat(sep, " | ") .. " |"
    for _, r in ipairs(rows) do
        local cells = {}
        for i = 1, #header do cells[i] = cell(r[i] or "") end
        out[#out + 1] = "| " .. concat(cells, " | ") .. " |"
    end
    return concat(out, "\n")
end

local function where(meta, load)
    return format("commit %s, %s, %s%s", meta.commit or "?", meta.date or "?", meta.machine or "?",
        load and meta.load and (", load " .. meta.load .. " at the start") or "")
end

-- The distinct runs behind a list of metas: "`cmd`: commit, date, machine; ..."
local function provenance(metas)
    local seen, out = {}, {}
    for _, m in ipairs(metas) do
        if not seen[m] then
            seen[m] = true
            out[#out + 1] = format("`%s`: %s", m.command or "?", where(m, true))
        end
    end
    return concat(out, "; ")
end

-- The README: the headline targets; this page: those and every target
-- of a benchmark without a table of its own that shows them (make bench's
-- table has a column of its targets).
local function summary(headline_only, link)
    local rows, metas = {}, {}
    for _, t in ipairs(targets) do
        if t.headline or not (headline_only or t.from == "bench") then
            rows[#rows + 1] = { t.what, t.figure, t.limit, t.met == "met" and "met" or "**NOT met**" }
            metas[#metas + 1] = t.meta
        end
    end
    local text = markdown({ "measured", "now", "target", "" }, rows)
    if headline_only then
        local runs, seen = {}, {}
        for _, m in ipairs(metas) do
            local w = where(m)
            if not seen[w] then seen[w], runs[#runs + 1] = true, w end
        end
        return text .. "\n\nWritten by `make bench-report` (" .. concat(runs, "; ") .. "); every figure, its"
            .. " command and method: [benchmarks](" .. link .. ")."
    end
    return text .. "\n\nWritten by `make bench-report` from these runs: " .. provenance(metas) .. "."
end

local function all_tables()
    local out = {}
    for _, t in ipairs(tables) do
        out[#out + 1] = t.caption .. " (" .. provenance(t.metas) .. "):\n\n" .. markdown(t.header, t.rows)
    end
    if #missing > 0 then
        out[#out + 1] = "Not measured yet: " .. concat(missing, ", ") .. " (`sh tools/bench-report.sh "
            .. concat(missing, " ") .. "`)."
    end
    return concat(out, "\n\n")
end

-- Replaces what is between the markers NAME of the file at path.
local function put(path, name, body)
    local text = assert(read(path))
    local begin = "<!-- bench-report:" .. name .. " begin -->"
    local stop = "<!-- bench-report:" .. name .. " end -->"
    local a, b = text:find(begin, 1, true)
    local c = text:find(stop, 1, true)
    assert(a and c and c > b, path .. ": no " .. begin .. " ... " .. stop)
    text = text:sub(1, b) .. "\n" .. body .. "\n" .. text:sub(c)
    local f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
end

put("README.md", "summary", summary(true, "docs/benchmarks.md#current-figures"))
put("docs/benchmarks.md", "summary", summary(false))
put("docs/benchmarks.md", "tables", all_tables())
print(format("bench-report: wrote README.md and docs/benchmarks.md (%d targets, %d tables%s)", #targets,
    #tables,
    #missing > 0 and (", none yet from " .. concat(missing, ", ")) or ""))
