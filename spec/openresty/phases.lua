--- Test-only handlers that spec/44-openresty_phases_spec.lua loads into
-- nginx: the lock API run in each phase docs/openresty.md lists (its table
-- "Which phase uses which transport"), with the clients made once in
-- init_by_lua. Each phase's run is kept for GET /report?phase=P (one
-- worker), exit_worker's in a file under the prefix.
local redlock = require "redlock"
local cosocket = require "redlock.cosocket"
local counter = require "counter"

local ngx = ngx
local format, concat, tostring, pcall = string.format, table.concat, tostring, pcall

local _M = {}
local results = {}
local one, many, base -- a client of one server, a Redlock of 3; the keys' prefix

--- init_by_lua: makes the clients (ports: three Redis servers for the
-- Redlock, the first also the single server's), then runs the API there.
function _M.init(ports, prefix)
    local r = counter.redis
    local servers = {}
    for i, port in ipairs(ports) do servers[i] = { host = r.host, port = port } end
    one = redlock.new { servers = { servers[1] }, retry_delay = 10, retry_jitter = 0 }
    -- (server_timeout: a loaded test host misses the default now and then)
    many = redlock.new { servers = servers, retry_delay = 10, retry_jitter = 0, server_timeout = 1000 }
    base = prefix
    _M.run("init")
end

-- What a call came to: "ok", or its error code (the message when there is none).
local function word(v, err, code)
    if v then return "ok" end
    return code or tostring(err)
end

-- Each step of the API, as "step=outcome" (outcome "ok", or the error's
-- code); k: the phase's keys' prefix.
local function api(k)
    local out = {}
    local function say(step, outcome) out[#out + 1] = step .. "=" .. outcome end
    say("transport", cosocket.yieldable() and "cosocket" or "blocking")
    -- a key held for 200 ms: the acquire waits for it
    local h = one:acquire(k .. ":lock", { ttl = 200 })
    say("hold", word(h))
    local l, err, code = one:acquire(k .. ":lock", { wait = 5000 })
    say("acquire_waited", word(l, err, code))
    if l then
        say("fence_after_holder", tostring(h ~= nil and l.fence > h.fence))
        say("try_held", word(one:try_acquire(k .. ":lock")))
        say("extend", word(l:extend()))
        say("release", word(l:release()))
    end
    local t
    t, err, code = one:try_acquire(k .. ":lock")
    say("try_acquire", word(t, err, code))
    if t then say("release_try", word(t:release())) end
    say("with_lock", word(one:with_lock(k .. ":lock", function(lock) return lock.fence end)))
    -- a permit of two, readers, a group
    local p1 = one:acquire(k .. ":sem", { limit = 2, ttl = 200 })
    local p2 = one:try_acquire(k .. ":sem", { limit = 2 })
    say("permits", word(p1) .. "," .. word(p2))
    local p3
    p3, err, code = one:acquire(k .. ":sem", { limit = 2, wait = 5000 })
    say("permit_waited", word(p3, err, code))
    for _, p in ipairs { p2, p3 } do if p then p:release() end end
    local r1 = one:acquire(k .. ":rw", { shared = true })
    local r2 = one:try_acquire(k .. ":rw", { shared = true })
    say("readers", word(r1) .. "," .. word(r2))
    say("writer_refused", word(one:try_acquire(k .. ":rw")))
    for _, r in ipairs { r1, r2 } do if r then r:release() end end
    local w
    w, err, code = one:acquire(k .. ":rw", { wait = 5000 })
    say("writer", word(w, err, code))
    if w then w:release() end
    local g
    g, err, code = one:acquire({ k .. ":g1", k .. ":g2" }, { wait = 5000 })
    say("group", word(g, err, code))
    say("group_excludes", word(one:try_acquire(k .. ":g2")))
    if g then say("group_release", word(g:release())) end
    -- a Redlock over three servers
    local mh = many:acquire(k .. ":redlock", { ttl = 200 })
    say("redlock_hold", word(mh))
    local m
    m, err, code = many:acquire(k .. ":redlock", { wait = 5000 })
    say("redlock_waited", word(m, err, code))
    if m then
        say("redlock_extend", word(m:extend()))
        say("redlock_release", word(m:release()))
    end
    say("redlock_with_lock", word(many:with_lock(k .. ":redlock", function() return true end)))
    return concat(out, " ")
end

--- Runs the API in this phase (once per phase: a filter, a handshake may
-- run twice), keeping what it came to (or the error it raised).
function _M.run(phase)
    if results[phase] then return results[phase] end
    results[phase] = "running"
    -- (the pid: `nginx -t` runs init_by_lua too, in a process of its own)
    local ok, out = pcall(api, format("%s:%s:%d", base, phase, ngx.worker.pid()))
    results[phase] = ok and out or ("raised: " .. tostring(out))
    return results[phase]
end

--- GET /report?phase=P: that phase's run, once it has ended (a timer,
-- the log phase end after the response); "none" after 20 s.
function _M.report()
    local phase = ngx.var.arg_phase
    for _ = 1, 2000 do
        local r = results[phase]
        if r and r ~= "running" then return ngx.say(r) end
        ngx.sleep(0.01)
    end
    ngx.say("none")
end

--- content_by_lua: the content phase, and a timer started from it.
function _M.content()
    _M.run("content")
    ngx.timer.at(0, function(premature)
        if not premature then _M.run("timer") end
    end)
    ngx.say("ok")
end

--- balancer_by_lua: the phase's run, then this nginx itself as the peer.
function _M.balancer()
    _M.run("balancer")
    assert(require("ngx.balancer").set_current_peer("127.0.0.1", tonumber(ngx.var.server_port)))
end

--- exit_worker_by_lua: the run written to exit_worker.txt under the prefix.
function _M.exit_worker()
    local out = _M.run("exit_worker")
    local f = io.open(ngx.config.prefix() .. "exit_worker.txt", "w")
    if f then
        f:write(format("%s\n", out))
        f:close()
    end
end

return _M
