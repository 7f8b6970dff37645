--- The checker: reads the whole recorded history of a run (every call of
-- every client, the fenced resource's log of accepted writes, the faults
-- injected and what was left in the servers) and checks, per key:
--   1. no lost update on the fenced resource;
--   2. fences strictly increasing in real-time grant order across holders
--      (a grant that returned before another was sent has the smaller
--      fence), and never two holders with one fence;
--   3. no two holders' validity windows overlap (from the acquire's return
--      to the release sent or the validity remaining() promised running
--      out, whichever is first), readers among themselves aside, and no
--      more than `limit` permits at once;
--   4. every call returns within its bound with a documented error code,
--      no library call raises, every client stops when told, and locking
--      resumes within a bound after each fault is healed;
--   5. nothing is left in the servers once every lock has ended (the
--      fence counters aside).
-- Where docs/guarantees.md does not promise 2 or 3 (a fault that loses a
-- server's data or steps its clock, an asynchronous failover: the fault's
-- taints), an overlap or a fence out of order is counted as allowed, not
-- failed. Over Redlock one such server is enough too: a lock held on a
-- bare majority (a server was down, cut off or slow when it was taken or
-- last renewed) shares one server only with the next majority, and which
-- servers hold a lock is not in the history.
local format = string.format
local huge, max, min = math.huge, math.max, math.min

local _M = {}

local ACQUIRE_CODES = { timeout = true, locked = true, ["no quorum"] = true, connection = true, server = true,
    replicas = true }
local LOCK_CODES = { ["not owner"] = true, connection = true, server = true, ["no quorum"] = true,
    replicas = true }

local function num(v) return tonumber(v) end

local function split(s, sep)
    local out = {}
    for part in (s or ""):gmatch("[^" .. sep .. "]+") do out[#out + 1] = part end
    return out
end

-- The holds of the history, by id, each with its records.
local function holds_of(records)
    local holds, order, crashes, starts, ends = {}, {}, {}, {}, {}
    local function hold(id)
        local h = holds[id]
        if not h then
            h = { id = id, obs = {}, ops = {}, exts = {}, told = {} }
            holds[id] = h
            order[#order + 1] = h
        end
        return h
    end
    for _, r in ipairs(records) do
        local ev = r.ev
        if ev == "acq" then
            local h = hold(r.id)
            h.acq = r
            h.c, h.kind = r.c, r.kind
            h.keys = split(r.keys, ",")
            h.sent, h.ret = num(r.sent), num(r.ret)
            h.ok = r.ok == "1"
            h.wait, h.ttl = num(r.wait), num(r.ttl)
            if h.ok then
                h.fence = {}
                if r.fences then
                    for _, kf in ipairs(split(r.fences, ",")) do
                        local k, f = kf:match("^(.*):(%d+)$")
                        h.fence[k] = num(f)
                    end
                elseif r.fence then
                    h.fence[h.keys[1]] = num(r.fence)
                end
                h.told[#h.told + 1] = { num(r.remt), num(r.rem) }
            end
        elseif ev == "obs" then
            local h = hold(r.id)
            h.obs[#h.obs + 1] = r
            h.told[#h.told + 1] = { num(r.t), num(r.rem) }
        elseif ev == "op" then
            local h = hold(r.id)
            h.ops[#h.ops + 1] = r
        elseif ev == "ext" then
            local h = hold(r.id)
            h.exts[#h.exts + 1] = r
            h.told[#h.told + 1] = { num(r.ret), num(r.rem) }
            -- from its sending the server may take its ttl: a shorter one
            -- ends the validity sooner, whatever the answer
            if r.ttl then h.told[#h.told + 1] = { num(r.sent), num(r.ttl), cap = true } end
        elseif ev == "rel" then
            local h = hold(r.id)
            h.rel = r
        elseif ev == "crash" then
            crashes[#crashes + 1] = r
        elseif ev == "start" then
            starts[r.c] = r
        elseif ev == "end" then
            ends[r.c] = r
        end
    end
    -- Where each granted hold's validity ended: the client is told an end
    -- (t + remaining()) at each look, and a later look replaces it (an
    -- extend or a renewal moves it, further or nearer); an extend sent
    -- with a shorter ttl brings it nearer from its sending; the validity
    -- is over at the first look past the end it was told last.
    for _, h in ipairs(order) do
        if h.ok then
            table.sort(h.told, function(a, b) return a[1] < b[1] end)
            local stop
            for _, t in ipairs(h.told) do
                if stop and t[1] >= stop then break end
                if t.cap then
                    if stop and t[1] + t[2] < stop then stop = t[1] + t[2] end
                else
                    stop = t[1] + t[2]
                end
            end
            h.valid_until = stop or h.ret
        end
    end
    return holds, order, crashes, starts, ends
end

-- The faults' taints: lease (exclusion not promised), counter losses and
-- clocks ahead or behind (fences not promised when both meet).
local function taints_of(faults, max_ttl, mode)
    local lease, loss, ahead = {}, {}, {}
    local function server(name) return mode.taint_server and mode.taint_server(name) or name end
    for _, f in ipairs(faults) do
        local s = server(f.server or f.target)
        local from, healed = num(f.start), num(f.healed)
        if f.lease == "1" then
            lease[#lease + 1] = { server = s, from = from, to = healed + max_ttl + 500, fault = f }
        end
        if f.counter == "1" then loss[#loss + 1] = { server = s, from = from, to = healed, fault = f } end
        if f.clock then
            local j = num(f.clock)
            ahead[#ahead + 1] = { server = s, from = from, to = healed + max(0, j) * 1000, fault = f }
        end
    end
    local fence = {}
    for _, l in ipairs(loss) do
        for _, a in ipairs(ahead) do
            -- (Redlock's fence write-back carries a clock's lead to the
            -- other servers' counters)
            local same = l.server == a.server or mode.fence_spread
            if same and l.from <= a.to and a.from <= l.to then
                fence[#fence + 1] = { server = l.server, from = l.from, to = max(l.to, a.to) + max_ttl,
                    fault = l.fault, also = a }
            end
        end
    end
    return { lease = lease, fence = fence }
end

-- Whether taints (a list) excuse something that happened within [from,
-- to]: a server tainted then. Returns the faults.
local function excused(list, from, to)
    local faults = {}
    for _, t in ipairs(list) do
        if t.from <= to and from <= t.to then
            faults[#faults + 1] = t.fault
            if t.also then faults[#faults + 1] = t.also.fault end
        end
    end
    if #faults > 0 then return faults end
    return nil
end

local function fault_names(faults)
    local seen, out = {}, {}
    for _, f in ipairs(faults or {}) do
        if not seen[f.kind] then
            seen[f.kind] = true
            out[#out + 1] = f.kind
        end
    end
    table.sort(out)
    return out
end

--- Checks a run. run: { records, faults, resource = {key = {lines}},
-- leftovers = {...}, stuck = {...}, mode, max_ttl, t0, slack, resume_bound,
-- pauses }. Returns the report: counts, violations (each with check,
-- what, holds, from, to), allowed (overlaps and fence inversions the
-- docs do not promise against, by fault kind).
function _M.check(run)
    local mode = run.mode
    local holds, order, crashes, starts, ends = holds_of(run.records)
    local taints = taints_of(run.faults, run.max_ttl, mode)
    local report = { violations = {}, allowed = {}, counts = { holds = 0, calls = 0, acquires = 0,
        failed = {}, lost_updates = 0, stale_refused = 0, overlaps_allowed = 0, fence_allowed = 0 },
        resume = {} }
    local V = report.violations
    local function violation(check, what, hs, from, to)
        V[#V + 1] = { check = check, what = what, holds = hs or {}, from = from, to = to }
    end
    local function allow(kind_list, what)
        for _, k in ipairs(kind_list) do
            report.allowed[k] = report.allowed[k] or { overlaps = 0, fences = 0 }
            report.allowed[k][what] = report.allowed[k][what] + 1
        end
    end

    -- 4. calls: codes, bounds, crashes
    local paused = run.pauses or {}
    local function paused_ms(c, from, to)
        local total = 0
        for _, p in ipairs(paused[c] or {}) do
            local a, b = max(from, p.from), min(to, p.to)
            if b > a then total = total + (b - a) end
        end
        return total
    end
    local slack = run.slack
    for _, h in ipairs(order) do
        local a = h.acq
        if a then
            report.counts.calls = report.counts.calls + 1
            report.counts.acquires = report.counts.acquires + 1
            if h.ok then
                report.counts.holds = report.counts.holds + 1
            else
                local code = a.code or "?"
                report.counts.failed[code] = (report.counts.failed[code] or 0) + 1
                if not ACQUIRE_CODES[code] then
                    violation(4, format("acquire returned an undocumented code %q: %s", code, tostring(a.err)), { h })
                elseif code == "locked" and h.wait > 0 and a.style ~= "cli" then
                    violation(4, format("acquire with wait %d returned locked (only wait 0 may): %s", h.wait,
                        tostring(a.err)), { h })
                end
            end
            local took = h.ret - h.sent - paused_ms(h.c, h.sent, h.ret)
            if took > h.wait + slack then
                violation(4, format("acquire took %.0f ms, over its bound of wait %d + %d ms", took, h.wait, slack),
                    { h }, h.sent, h.ret)
            end
        end
        for _, r in ipairs(h.exts) do
            report.counts.calls = report.counts.calls + 1
            if r.ok ~= "1" and not LOCK_CODES[r.code or "?"] then
                violation(4, format("extend returned an undocumented code %q: %s", tostring(r.code), tostring(r.err)),
                    { h })
            end
            local took = num(r.ret) - num(r.sent) - paused_ms(h.c, num(r.sent), num(r.ret))
            if took > slack then
                violation(4, format("extend took %.0f ms, over its bound of %d ms", took, slack), { h },
                    num(r.sent), num(r.ret))
            end
        end
        if h.rel then
            local r = h.rel
            report.counts.calls = report.counts.calls + 1
            if r.ok ~= "1" and not LOCK_CODES[r.code or "?"] then
                violation(4, format("release returned an undocumented code %q: %s", tostring(r.code),
                    tostring(r.err)), { h })
            end
            local took = num(r.ret) - num(r.sent) - paused_ms(h.c, num(r.sent), num(r.ret))
            if took > slack and not h.acq.wl then
                violation(4, format("release took %.0f ms, over its bound of %d ms", took, slack), { h },
                    num(r.sent), num(r.ret))
            end
        end
        for _, op in ipairs(h.ops) do
            if op.ok == "0" then report.counts.stale_refused = report.counts.stale_refused + 1 end
        end
    end
    for _, r in ipairs(crashes) do
        violation(4, "a library call raised: " .. tostring(r.err), { holds[r.id] }, num(r.t), num(r.t))
    end
    for name in pairs(starts) do
        if not ends[name] then
            violation(4, format("client %s did not end when told to stop (stuck in a call?)", name), {})
        end
    end
    for _, line in ipairs(run.ngx_crashes or {}) do
        violation(4, "nginx logged a crash: " .. line, {})
    end
    for _, name in ipairs(run.stuck or {}) do
        violation(4, format("process %s had to be killed at the end", name), {})
    end

    -- when each hold began, sorted (the results count the holds near each fault)
    local began = {}
    for _, h in ipairs(order) do
        if h.ok then began[#began + 1] = h.ret end
    end
    table.sort(began)
    report.began = began

    -- the grants, per key
    local grants = {}
    for _, h in ipairs(order) do
        if h.ok then
            for _, k in ipairs(h.keys) do
                grants[k] = grants[k] or {}
                local g = grants[k]
                local stop = h.valid_until or h.ret
                if h.rel and num(h.rel.sent) < stop then stop = num(h.rel.sent) end
                g[#g + 1] = { h = h, key = k, fence = h.fence[k], from = h.ret, to = stop }
            end
        end
    end

    -- 2. fences
    for key, g in pairs(grants) do
        local by_ret, by_sent = {}, {}
        for i, x in ipairs(g) do
            by_ret[i], by_sent[i] = x, x
        end
        table.sort(by_ret, function(a, b) return a.h.ret < b.h.ret end)
        table.sort(by_sent, function(a, b) return a.h.sent < b.h.sent end)
        local j, best = 0, nil
        for _, b in ipairs(by_sent) do
            while j < #by_ret and by_ret[j + 1].h.ret < b.h.sent do
                j = j + 1
                local x = by_ret[j]
                if x.fence and (not best or x.fence > best.fence) then best = x end
            end
            if b.fence and best and best.fence >= b.fence then
                local fs = excused(taints.fence, best.h.sent, b.h.ret)
                if fs then
                    report.counts.fence_allowed = report.counts.fence_allowed + 1
                    allow(fault_names(fs), "fences")
                else
                    violation(2, format("%s: fence %.0f granted after fence %.0f (not larger)", key, b.fence,
                        best.fence), { best.h, b.h }, best.h.sent, b.h.ret)
                end
            end
        end
        -- Equal fences: a violation but for two readers or permits whose
        -- acquires ran at once (Redlock's fence is the largest of a
        -- majority's, and two majorities' largest can be equal; neither
        -- came first)
        local function shared(h) return h.kind == "reader" or h.kind == "permit" end
        local seen = {}
        for _, x in ipairs(g) do
            if x.fence then
                local other = seen[x.fence]
                local together = other and shared(x.h) and shared(other.h)
                    and x.h.sent < other.h.ret and other.h.sent < x.h.ret
                if other and other.h ~= x.h and not together then
                    local first, second = other.h, x.h
                    if second.sent < first.sent then first, second = second, first end
                    if not excused(taints.fence, first.sent, second.ret) then
                        violation(2, format("%s: two holders with fence %.0f", key, x.fence), { first, second },
                            first.sent, second.ret)
                    end
                end
                seen[x.fence] = x
            end
        end
    end

    -- 3. validity windows
    local limit = run.limit
    for key, g in pairs(grants) do
        local list = {}
        for _, x in ipairs(g) do
            if x.to > x.from then list[#list + 1] = x end
        end
        table.sort(list, function(a, b) return a.from < b.from end)
        local active = {}
        for _, w in ipairs(list) do
            local keep = {}
            for _, a in ipairs(active) do
                if a.to > w.from then keep[#keep + 1] = a end
            end
            active = keep
            local conflicts = {}
            local wx = w.h.kind ~= "reader" and w.h.kind ~= "permit"
            local permits = 0
            for _, a in ipairs(active) do
                local ax = a.h.kind ~= "reader" and a.h.kind ~= "permit"
                if wx or ax then conflicts[#conflicts + 1] = a end
                if a.h.kind == "permit" and w.h.kind == "permit" then permits = permits + 1 end
            end
            if w.h.kind == "permit" and permits + 1 > (limit or 1) then
                for _, a in ipairs(active) do
                    if a.h.kind == "permit" then conflicts[#conflicts + 1] = a end
                end
            end
            for _, a in ipairs(conflicts) do
                local fs = excused(taints.lease, a.h.sent, w.h.ret)
                if fs then
                    report.counts.overlaps_allowed = report.counts.overlaps_allowed + 1
                    allow(fault_names(fs), "overlaps")
                else
                    local what = w.h.kind == "permit" and a.h.kind == "permit"
                        and format("%s: %d permits held at once (limit %d)", key, permits + 1, limit or 1)
                        or format("%s: %s %s and %s %s hold at once for %.0f ms", key, a.h.kind, a.h.id,
                            w.h.kind, w.h.id, min(a.to, w.to) - w.from)
                    violation(3, what, { a.h, w.h }, a.h.sent, max(w.h.ret, min(a.to, w.to)))
                end
            end
            active[#active + 1] = w
        end
    end

    -- 1. lost updates: a write made from a stale read
    for key, lines in pairs(run.resource) do
        local last
        for _, line in ipairs(lines) do
            local id, fence, expected, cur, new = line:match("^(%S+) (%d+) (%S+) (%S+) (%S+)$")
            if id then
                if expected ~= cur then
                    report.counts.lost_updates = report.counts.lost_updates + 1
                    local h, p = holds[id], last and holds[last]
                    local from = min(h and h.sent or huge, p and p.sent or huge)
                    local to = max(h and h.ret or -huge, p and p.ret or -huge)
                    if not (h and p and excused(taints.fence, from, to)) then
                        violation(1, format("%s: lost update: %s (fence %s) wrote %s over %s, having read %s",
                            key, id, fence, new, cur, expected), { p, h }, from, to)
                    end
                end
                last = id
            end
        end
    end

    -- 4. locking resumes after each heal
    local oks = {}
    for _, h in ipairs(order) do
        if h.ok then oks[#oks + 1] = h end
    end
    table.sort(oks, function(a, b) return a.sent < b.sent end)
    for i, f in ipairs(run.faults) do
        local healed = num(f.healed)
        local next_start = run.faults[i + 1] and num(run.faults[i + 1].start) or run.t_stop
        local first
        for _, h in ipairs(oks) do
            if h.sent >= healed then
                first = h
                break
            end
        end
        local took = first and (first.ret - healed)
        report.resume[#report.resume + 1] = { kind = f.kind, took = took }
        local bound = run.resume_bound
        if (not first or took > bound) and next_start - healed > bound then
            violation(4, format("locking did not resume within %d ms after %s was healed%s", bound, f.kind,
                took and format(" (took %.0f ms)", took) or ""), first and { first } or {}, healed,
                healed + bound)
        end
    end

    -- 5. leftovers
    for _, l in ipairs(run.leftovers or {}) do
        violation(5, format("left behind on %s: %s (%s, pttl %s)", l.server, l.key, l.type, l.pttl), {})
    end
    return report
end

--- The records of a violation's window: its holds', and every other
-- call on the same keys and every fault within [from, to].
function _M.window(run, v)
    local from, to = v.from, v.to
    local keys, ids = {}, {}
    for _, h in ipairs(v.holds) do
        if h then
            ids[h.id] = true
            for _, k in ipairs(h.keys or {}) do keys[k] = true end
            from = min(from or h.sent, h.sent)
            to = max(to or h.ret, h.ret)
        end
    end
    if not from then return {} end
    local out = {}
    for _, r in ipairs(run.records) do
        local t = num(r.sent or r.t or r.ret)
        local mine = r.id and ids[r.id]
        local near = t and t >= from and t <= to
        local on_key = false
        for k in pairs(keys) do
            if (r.keys and ("," .. r.keys .. ","):find("," .. k .. ",", 1, true)) or r.key == k then on_key = true end
        end
        if mine or (near and on_key and r.ev == "acq") then out[#out + 1] = r end
    end
    for _, f in ipairs(run.faults) do
        if num(f.start) <= to and num(f.healed) >= from then out[#out + 1] = f end
    end
    table.sort(out, function(a, b)
        return (num(a.sent or a.t or a.start) or 0) < (num(b.sent or b.t or b.start) or 0)
    end)
    return out
end

_M.holds_of = holds_of

return _M
