--- What a torture run prints (per mode: counts, every violation with the
-- seed, the fault schedule and its window of history) and the results
-- table it writes into docs/guarantees.md between its markers (fault x
-- mode: faults injected / violations / overlaps allowed; a run rewrites
-- the columns of the modes it ran and keeps the others).
local checker = require "torture.checker"
local modes = require "torture.modes"

local format, concat = string.format, table.concat

local _M = {}

local FAULTS = { "pause_server", "pause_burst", "pause_client", "restart_kept", "restart_lost", "restart_delayed",
    "partition_server", "partition_client", "split_brain", "clock_jump", "failover", "kill_master",
    "cluster_failover", "cluster_kill", "reshard", "client_kill", "debug_sleep", "eviction" }
_M.FAULTS = FAULTS

local function rel(run, t) return format("%+.1f", (tonumber(t) or 0) - run.t0) end

local function show(run, r)
    if r.ev == "fault" then
        return format("%9s  FAULT %s on %s for %s ms (healed %s)%s%s", rel(run, r.start), r.kind, r.target, r.len,
            rel(run, r.healed), r.jump and (", jump " .. r.jump .. " s") or "",
            r.lease and ", not promised" or "")
    end
    local parts = {}
    for _, k in ipairs({ "id", "kind", "type", "server", "keys", "key", "op", "ttl", "wait", "style", "ok", "code",
        "fence", "fences",
        "rem", "v" }) do
        if r[k] then parts[#parts + 1] = k .. "=" .. r[k] end
    end
    local times = {}
    for _, k in ipairs({ "sent", "ret", "t", "remt" }) do
        if r[k] then times[#times + 1] = k .. " " .. rel(run, r[k]) end
    end
    return format("%9s  %-4s %s [%s]%s", rel(run, r.sent or r.t), r.ev, concat(parts, " "), concat(times, ", "),
        r.err and ("  err=" .. r.err) or "")
end

local function attribute(run, v)
    local kinds = {}
    if v.from then
        for _, f in ipairs(run.faults) do
            if tonumber(f.start) <= v.to and tonumber(f.healed) + run.max_ttl >= v.from then kinds[f.kind] = true end
        end
    end
    local out = {}
    for k in pairs(kinds) do out[#out + 1] = k end
    table.sort(out)
    return out
end

--- The checker over a run: meta (what torture/run.lua saves in its
-- meta.lua), the history's records, the faults' records. Returns the
-- report (the run and its counts in it).
function _M.report(meta, records, fault_records)
    local run = { records = records, faults = fault_records, mode = modes[meta.mode] }
    for k, v in pairs(meta) do
        if k ~= "mode" then run[k] = v end
    end
    local report = checker.check(run)
    report.run = run
    report.name, report.seed, report.duration = meta.mode, meta.seed, meta.duration
    report.faults = {}
    for _, f in ipairs(fault_records) do report.faults[f.kind] = (report.faults[f.kind] or 0) + 1 end
    return report
end

--- Prints a mode's report through say(fmt, ...).
function _M.print(report, say)
    local run, c = report.run, report.counts
    local fl = {}
    for k, n in pairs(report.faults) do fl[#fl + 1] = k .. " " .. n end
    table.sort(fl)
    local failed = {}
    for k, n in pairs(c.failed) do failed[#failed + 1] = k .. " " .. n end
    table.sort(failed)
    local allowed = {}
    for k, a in pairs(report.allowed) do allowed[#allowed + 1] = format("%s: %d overlaps, %d fences", k, a.overlaps,
        a.fences) end
    table.sort(allowed)
    local resumes, worst = 0, 0
    for _, r in ipairs(report.resume) do
        if r.took then
            resumes = resumes + 1
            if r.took > worst then worst = r.took end
        end
    end
    say("== %s (seed %d, %d s): %d holds of %d acquires, %d calls; faults: %s", report.name, report.seed,
        report.duration, c.holds, c.acquires, c.calls, #fl > 0 and concat(fl, ", ") or "none")
    say("   acquires refused or failed: %s; fenced reads/writes refused by the resource (stale holders): %d",
        #failed > 0 and concat(failed, ", ") or "none", c.stale_refused)
    say("   overlaps where not promised: %d; fences out of order where not promised: %d%s", c.overlaps_allowed,
        c.fence_allowed, #allowed > 0 and (" (" .. concat(allowed, "; ") .. ")") or "")
    say("   locking resumed after %d heals, the slowest in %.0f ms", resumes, worst)
    local first
    for _, v in ipairs(report.violations) do
        if v.to and (not first or v.to < first) then first = v.to end
    end
    say("   violations: %d%s", #report.violations,
        first and format(" (the first at %.1f s into the run)", (first - run.t0) / 1000) or "")
    if #report.violations == 0 then return end
    local shown = 0
    for _, v in ipairs(report.violations) do
        shown = shown + 1
        if shown > 8 then
            say("   ... and %d more", #report.violations - 8)
            break
        end
        local kinds = attribute(run, v)
        say("   [check %d] %s%s", v.check, v.what, #kinds > 0 and (" (faults near: " .. concat(kinds, ", ") .. ")") or "")
        local w = checker.window(run, v)
        for i, r in ipairs(w) do
            if i > 40 then
                say("      ... %d more records", #w - 40)
                break
            end
            say("      %s", show(run, r))
        end
    end
    say("   fault schedule (seed %d, mode %s):", report.seed, report.name)
    for _, f in ipairs(run.faults) do say("      %s", show(run, f)) end
end

--- The last lines: one per mode, and the command that replays each;
-- then "N passed, M failed" (a mode passes with no violation), as every
-- suite of `make test` ends.
function _M.summary(reports, say)
    say("== torture summary")
    local bad, passed = 0, 0
    for _, r in ipairs(reports) do
        local nf = 0
        for _, n in pairs(r.faults) do nf = nf + n end
        say("   %-8s %6d holds, %4d faults, %d violations, %d overlaps allowed   (make torture MODE=%s SEED=%d "
            .. "DURATION=%d)", r.name, r.counts.holds, nf, #r.violations, r.counts.overlaps_allowed, r.name, r.seed,
            r.duration)
        if r.failed then say("   %-8s the run itself failed: %s", r.name, r.failed:match("^[^\n]*")) end
        bad = bad + #r.violations
        if #r.violations == 0 and not r.failed then passed = passed + 1 end
    end
    say("%d violations", bad)
    say("%d passed, %d failed", passed, #reports - passed)
end

-- The table's cells for one report: column values by row name.
local function column(report)
    local col = {}
    local by_fault = {}
    for _, v in ipairs(report.violations) do
        local kinds = attribute(report.run, v)
        if #kinds == 0 then kinds = { "none" } end
        for _, k in ipairs(kinds) do by_fault[k] = (by_fault[k] or 0) + 1 end
    end
    -- the holds that began during a fault or within the longest ttl after
    -- its heal, by fault kind
    local near = {}
    local run = report.run
    for _, f in ipairs(run.faults) do
        local from, to = tonumber(f.start), tonumber(f.healed) + run.max_ttl
        local n = 0
        for _, t in ipairs(report.began) do
            if t >= from and t <= to then n = n + 1 end
        end
        near[f.kind] = (near[f.kind] or 0) + n
    end
    col.run = format("%d s, seed %d", report.duration, report.seed)
    col.holds = tostring(report.counts.holds)
    col.violations = tostring(#report.violations)
    col.allowed = tostring(report.counts.overlaps_allowed)
    local mode = modes[report.name]
    for _, f in ipairs(FAULTS) do
        local n = report.faults[f]
        local a = report.allowed[f]
        if n then
            col[f] = format("%d / %d / %d / %d", n, near[f] or 0, by_fault[f] or 0, a and a.overlaps or 0)
        elseif mode.faults[f] then
            col[f] = "0"
        else
            col[f] = "-"
        end
    end
    return col
end

local BEGIN, END = "<!-- torture results: written by make torture -->", "<!-- end of torture results -->"

local ROWS = { { "run", "seconds, seed" }, { "holds", "holds" }, { "violations", "violations" },
    { "allowed", "overlaps where not promised" } }
for _, f in ipairs(FAULTS) do ROWS[#ROWS + 1] = { f, "`" .. f .. "`" } end

--- Rewrites the table between the markers of the file at path: the
-- columns of these reports' modes replaced, the others kept.
function _M.write_docs(reports, path, seed, duration, how)
    local f = assert(io.open(path))
    local text = f:read("*a")
    f:close()
    local a, b = text:find(BEGIN, 1, true)
    local c = text:find(END, 1, true)
    assert(a and c, path .. " has no torture markers")
    local old = text:sub(b + 1, c - 1)
    -- the cells there now, by row label and column
    local cells = {}
    local header
    for line in old:gmatch("[^\n]+") do
        if line:match("^|") then
            local cols = {}
            for cell in line:gmatch("|([^|]*)") do cols[#cols + 1] = cell:match("^%s*(.-)%s*$") end
            if cols[#cols] == "" then cols[#cols] = nil end
            if not header then
                header = cols
            elseif not line:match("^|%s*%-%-%-") then
                cells[cols[1]] = cols
            end
        end
    end
    local index = {}
    for i, name in ipairs(modes.ORDER) do index[name] = i + 1 end
    local by_label = {}
    for _, row in ipairs(ROWS) do
        by_label[row[1]] = cells[row[2]] or {}
    end
    for _, r in ipairs(reports) do
        local col = r.run and column(r) or { run = "the run failed" }
        for _, row in ipairs(ROWS) do
            by_label[row[1]][index[r.name]] = col[row[1]] or ""
        end
    end
    local lines = { "| fault | " .. (function()
        local t = {}
        for _, m in ipairs(modes.ORDER) do t[#t + 1] = modes[m].title end
        return concat(t, " | ")
    end)() .. " |", "| --- |" .. string.rep(" --- |", #modes.ORDER) }
    for _, row in ipairs(ROWS) do
        local t = { row[2] }
        for i = 1, #modes.ORDER do t[i + 1] = by_label[row[1]][i + 1] or "" end
        lines[#lines + 1] = "| " .. concat(t, " | ") .. " |"
    end
    local date = os.date("!%Y-%m-%d")
    local commit = (io.popen("git rev-parse --short HEAD 2>/dev/null"):read("*l")) or "?"
    local runs = {}
    for _, r in ipairs(reports) do runs[#runs + 1] = r.name end
    local body = "\n" .. concat(lines, "\n") .. "\n\nLast written " .. date .. " at commit " .. commit
        .. " by `make torture MODE=" .. concat(runs, ",") .. " SEED=" .. seed .. " DURATION=" .. duration
        .. "`" .. (how or "") .. " (each column: `make torture MODE=<mode> SEED=<seed> DURATION=<seconds>`"
        .. " with its first row).\n"
    text = text:sub(1, b) .. body .. text:sub(c)
    f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
end

return _M
