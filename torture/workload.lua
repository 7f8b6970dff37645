--- One hold of the workload, the same in a plain Lua process and inside
-- nginx: a kind (lock, reader, group, permit) on keys drawn from the
-- client's random stream, acquired, used against the fenced resource,
-- maybe extended or renewed, released; every call recorded with its
-- sent and returned times (core.now(): CLOCK_MONOTONIC, system-wide, so
-- the times of all processes compare).
--
-- env: client (a redlock client), rng, name (the process's name), now,
-- sleep(ms), log(fields), resource (torture.resource's ops), plan (the
-- mode's workload: kinds = {kind = weight}, keys, permit_key, limit,
-- ttls, waits, styles = {style = weight}).
local format, concat = string.format, table.concat
local pcall, tostring, ipairs = pcall, tostring, ipairs

local _M = {}

local W = {}
W.__index = W

function _M.new(env)
    local self = setmetatable({ n = 0 }, W)
    for k, v in pairs(env) do self[k] = v end
    return self
end

local function fences_text(lock, keys)
    if lock.fences then
        local t = {}
        for i, k in ipairs(keys) do t[i] = k .. ":" .. format("%.0f", lock.fences[k]) end
        return concat(t, ",")
    end
    return nil
end

-- The fenced work of a hold: exclusive kinds read (raising the fence
-- seen) and write +1 on each key; readers read; permits enter and leave.
function _M.work(self, id, kind, keys, lock, pause)
    local res, now, log = self.resource, self.now, self.log
    -- (the time read first: t + rem is never later than the validity
    -- the client was told)
    local function obs()
        local t = now()
        log { "ev", "obs", "id", id, "t", t, "rem", lock:remaining() }
    end
    local function op(name, key, fence, f, ...)
        obs()
        local sent = now()
        local ok, v = f(...)
        log { "ev", "op", "id", id, "op", name, "key", key, "fence", fence, "sent", sent, "ret", now(),
            "ok", ok == true and 1 or (ok == false and 0 or "e"), "v", v }
        return ok, v
    end
    if kind == "permit" then
        local key = keys[1]
        op("enter", key, lock.fence, res.enter, key, id)
        self.sleep(pause)
        op("leave", key, lock.fence, res.leave, key, id)
        return
    end
    for _, key in ipairs(keys) do
        local fence = lock.fences and lock.fences[key] or lock.fence
        if kind == "reader" then
            op("read", key, fence, res.read, key, fence, false)
            self.sleep(pause)
        else
            local ok, v = op("read", key, fence, res.read, key, fence, true)
            if ok then
                self.sleep(pause)
                op("write", key, fence, res.write, key, fence, v, tonumber(v) + 1, id)
            end
        end
    end
    obs()
end

-- The events worth reading beside a violation: a server failing within
-- a call, renewals failing, the lock found lost (docs/events.md).
local LOGGED = { server_error = true, renew_failed = true, lost = true, not_owner = true, warning = true }

local function opts_for(self, id, kind, ttl, wait)
    local now, log = self.now, self.log
    local o = { ttl = ttl, wait = wait }
    if kind == "reader" then o.shared = true end
    if kind == "permit" then o.limit = self.plan.limit end
    o.on_event = function(ev)
        if LOGGED[ev.type] then
            log { "ev", "event", "id", id, "t", now(), "type", ev.type, "server", ev.server, "code", ev.code,
                "err", ev.err and tostring(ev.err):sub(1, 200) }
        end
    end
    return o
end

--- What one hold does, drawn from rng: kind, keys (a list), ttl, wait,
-- style (plain, extend, renew, with_lock), pause (ms between a read and
-- its write).
function _M.draw(rng, plan)
    local kind = rng:weighted(plan.kinds)
    local keys
    if kind == "permit" then
        keys = { plan.permit_key }
    elseif kind == "group" then
        local a = rng:int(1, #plan.keys)
        local b = rng:int(1, #plan.keys - 1)
        if b >= a then b = b + 1 end
        keys = { plan.keys[a], plan.keys[b] }
    else
        keys = { rng:pick(plan.keys) }
    end
    local ttl, wait = rng:pick(plan.ttls), rng:pick(plan.waits)
    local style = rng:weighted(plan.styles)
    local pause = rng:chance(0.8) and rng:int(0, 20) or rng:int(20, math.floor(ttl / 2))
    return { kind = kind, keys = keys, ttl = ttl, wait = wait, style = style, pause = pause }
end

--- One hold. Returns the acquire's error code when it failed; a raise
-- inside the library is recorded (ev=crash) and ends the hold ("crash").
function W:hold()
    self.n = self.n + 1
    local id = self.name .. ":" .. (self.tag or "") .. self.n
    local rng, plan, now, log = self.rng, self.plan, self.now, self.log
    local d = _M.draw(rng, plan)
    local kind, keys, ttl, wait, style, pause = d.kind, d.keys, d.ttl, d.wait, d.style, d.pause
    local o = opts_for(self, id, kind, ttl, wait)
    local key_arg = kind == "group" and keys or keys[1]
    local client = self.client
    local keys_text = concat(keys, ",")
    local function acq_record(sent, ret, lock, err, code, extra)
        local f = { "ev", "acq", "id", id, "c", self.name, "kind", kind, "keys", keys_text, "ttl", ttl,
            "wait", wait, "style", style, "sent", sent, "ret", ret, "ok", lock and 1 or 0, "code", code,
            "err", err and err:sub(1, 300) }
        local n = 26 -- (the list above, holes counted)
        local function add(k, v)
            f[n + 1], f[n + 2] = k, v
            n = n + 2
        end
        if lock then
            add("remt", now())
            add("rem", lock:remaining())
            add("fence", lock.fence)
            add("fences", fences_text(lock, keys))
            add("limit", lock.limit)
        end
        if extra then add(extra[1], extra[2]) end
        log(f)
    end
    local ok, e = pcall(function()
        -- (returns the acquire's error code, if any)
        if style == "with_lock" then
            o.renew = true
            local sent = now()
            local fn_end
            local r, err, code = client:with_lock(key_arg, o, function(lock)
                fn_end = false
                acq_record(sent, now(), lock, nil, nil, { "wl", 1 })
                _M.work(self, id, kind, keys, lock, pause)
                fn_end = now()
            end)
            local ret = now()
            if fn_end == nil then
                acq_record(sent, ret, nil, err, code, { "wl", 1 })
                return code
            end
            log { "ev", "rel", "id", id, "sent", fn_end or ret, "ret", ret, "ok", r and 1 or 0, "code", code,
                "err", err and tostring(err):sub(1, 300) }
            return
        end
        if style == "renew" then o.renew = true end
        local sent = now()
        local lock, err, code = client:acquire(key_arg, o)
        local ret = now()
        acq_record(sent, ret, lock, err, code)
        if not lock then return code end
        if style == "renew" then pause = rng:int(math.floor(ttl / 2), ttl * 2) end
        _M.work(self, id, kind, keys, lock, pause)
        if style == "extend" then
            local esent, ettl = now(), rng:pick(plan.ttls)
            local eok, eerr, ecode = lock:extend(ettl)
            local eret = now()
            log { "ev", "ext", "id", id, "sent", esent, "ret", eret, "ttl", ettl, "ok", eok and 1 or 0, "code", ecode,
                "err", eerr and eerr:sub(1, 300), "rem", lock:remaining() }
            if eok then _M.work(self, id, kind, keys, lock, rng:int(0, 20)) end
        end
        local rsent = now()
        local rok, rerr, rcode = lock:release()
        log { "ev", "rel", "id", id, "sent", rsent, "ret", now(), "ok", rok and 1 or 0, "code", rcode,
            "err", rerr and rerr:sub(1, 300) }
    end)
    if not ok then
        log { "ev", "crash", "id", id, "t", now(), "err", tostring(e):sub(1, 500) }
        return "crash"
    end
    return e
end

return _M
