--- A subscription over a cosocket inside nginx, read by a light thread
-- while the caller's thread PINGs: a read never times out on a quiet
-- channel (nginx would log each timeout as an error), and a dead server is
-- noticed. Used by the release subscriber (redlock.nginx.wait) and by the
-- +switch-master subscriber (redlock.nginx.sentinel). Internal.
local core = require "redlock.core"

local ngx = rawget(_G, "ngx")
local encode = core.encode
local type = type

local _M = {}

--- How often the connection is PINGed (ms).
_M.TICK_MS = 1000

local PING = encode("PING")

--- Sends SUBSCRIBE channel and reads its answer: true, or nil[, err].
function _M.subscribe(sock, rd, channel)
    local ok, err = sock:send(encode("SUBSCRIBE", channel))
    if not ok then return nil, err end
    while true do
        local v = rd:get()
        if v ~= false then return type(v) == "table" and v[1] == "subscribe" or nil end
        local data
        data, err = sock:receiveany(16384)
        if not data then return nil, err end
        rd:feed(data)
    end
end

-- Reads messages until the connection fails, or until the answer to a
-- PING sent once the pump stops.
local function listen(h, sock, rd)
    while true do
        local data = sock:receiveany(16384)
        if not data then return end
        rd:feed(data)
        while true do
            local v = rd:get()
            if v == false then break end
            if type(v) == "table" then
                if v[1] == "message" and type(v[3]) == "string" then
                    h.message(v[2], v[3])
                elseif v[1] == "pong" and h.done then
                    return
                end
            end
        end
    end
end

--- Runs a subscribed connection until it fails or h.tick() says stop:
-- h.message(channel, payload) for each message; h.tick() every TICK_MS (or
-- sooner when h.wake, an ngx.semaphore, is posted), true to stop. Returns
-- once the reader is done.
function _M.pump(h, sock, rd)
    h.done = false
    local reader = ngx.thread.spawn(listen, h, sock, rd)
    while true do
        if h.wake then h.wake:wait(_M.TICK_MS / 1000) else ngx.sleep(_M.TICK_MS / 1000) end
        h.done = h.tick() and true or false
        if not sock:send(PING) or h.done then break end
    end
    ngx.thread.wait(reader)
end

return _M
