--- Runs the checker again over a saved run (a directory torture/run.sh
-- kept under build/torture/last/), and prints its report: for reading a
-- violation again, or trying a change to the checker.
-- usage: recheck.lua RUN_DIR... (from the repository's top)
--        recheck.lua --write COMMIT RUN_DIR...: also writes their results
--        table into docs/guarantees.md, saying the histories were recorded
--        at COMMIT and checked again here
package.path = "./?.lua;./lua/?.lua;./spec/?.lua;" .. package.path
local record = require "torture.record"
local results = require "torture.results"

local args = { ... }
local recorded_at
if args[1] == "--write" then
    recorded_at = assert(args[2], "usage: recheck.lua --write COMMIT RUN_DIR...")
    table.remove(args, 1)
    table.remove(args, 1)
end
assert(#args > 0, "usage: recheck.lua [--write COMMIT] RUN_DIR...")
local function say(...) print(string.format(...)) end
local reports, violations = {}, 0
for _, dir in ipairs(args) do
    local meta = dofile(dir .. "/meta.lua")
    local report = results.report(meta, record.read_dir(dir .. "/history"), record.read(dir .. "/faults.log"))
    results.print(report, say)
    reports[#reports + 1] = report
    violations = violations + #report.violations
end
if recorded_at then
    local r = reports[1]
    results.write_docs(reports, "docs/guarantees.md", r.seed, r.duration, ", its histories recorded at commit "
        .. recorded_at .. " and checked again by `lua5.4 torture/recheck.lua` with this commit's checker")
end
os.exit(violations == 0 and 0 or 1)
