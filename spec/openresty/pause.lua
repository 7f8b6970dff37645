--- Test-only handler that spec/43-stale_handoff_spec.lua loads into nginx:
-- spec/workers/stale_handoff.lua's case over cosockets.
local counter = require "counter"
local core = require "redlock.core"
local redlock = require "redlock"
local ngx_wait = require "redlock.nginx.wait"
local stale = require "workers.stale_handoff"

local ngx = ngx

local _M = {}

--- GET /stale?key=K&kind=lock|permit|reader: answers "paused handed w_remaining
-- x_remaining err" (see stale_handoff.run).
function _M.stale()
    local r = counter.redis
    local server = { host = r.host, port = r.port }
    -- the worker's subscriber listens first, so that the waiter joins the
    -- queue as one handed its lock by a message ("p"), not only woken
    local c = redlock.new { servers = { server } }
    local s = c.servers[1]
    ngx_wait.wait(s, ngx.var.arg_key .. ":warm", 1, core.now())
    local deadline = core.now() + 3000
    while not ngx_wait.listening(s) and core.now() < deadline do ngx.sleep(0.01) end
    local out = stale.run(server, ngx.var.arg_key, ngx.var.arg_kind, core.now)
    c:close()
    ngx.say(string.format("%s %s %.0f %.0f %s", tostring(out.paused), tostring(out.handed),
        out.w_remaining or -1, out.x_remaining or -1, tostring(out.err)))
end

return _M
