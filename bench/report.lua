-- What a benchmark hands `make bench-report` (tools/bench-report.sh): its
-- tables and its targets, appended as tab-separated lines to the file
-- $BENCH_REPORT names; without it, nothing. tools/bench_report.lua turns
-- them into the markdown of README.md and docs/benchmarks.md.
--   table  ID  CAPTION  HEADER...   a table (its columns' names)
--   row    ID  CELL...              a row of it
--   target HEADLINE  WHAT  FIGURE  TARGET  met|NOT met
-- A headline target is in the README's table too.
local M = {}

local path = os.getenv("BENCH_REPORT")
local concat = table.concat

local function emit(fields)
    if not path or path == "" then return end
    for i, v in ipairs(fields) do fields[i] = tostring(v):gsub("[\t\n]", " ") end
    local f = assert(io.open(path, "a"))
    f:write(concat(fields, "\t"), "\n")
    f:close()
end

function M.table(id, caption, header)
    local fields = { "table", id, caption }
    for _, h in ipairs(header) do fields[#fields + 1] = h end
    emit(fields)
end

function M.row(id, cells)
    local fields = { "row", id }
    for _, c in ipairs(cells) do fields[#fields + 1] = c end
    emit(fields)
end

function M.target(what, figure, target, met, headline)
    emit { "target", headline and "1" or "0", what, figure, target, met and "met" or "NOT met" }
end

return M
