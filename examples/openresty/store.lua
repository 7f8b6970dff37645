--- A minimal Redis client for this example's data, over nginx cosockets:
-- one command per call, simple replies only. Applications use
-- lua-resty-redis (or any client) for their data; redlock does not need one.
local ngx = ngx
local concat, tostring, tonumber, select, sub = table.concat, tostring, tonumber, select, string.sub

local _M = {}

local function fail(sock, err)
    sock:close()
    return nil, err
end

--- command(redis, name, args...) -> reply (string, or ngx.null) | nil, err
function _M.command(redis, ...)
    local n = select("#", ...)
    local out = { "*" .. n .. "\r\n" }
    for i = 1, n do
        local a = tostring((select(i, ...)))
        out[#out + 1] = "$" .. #a .. "\r\n" .. a .. "\r\n"
    end
    local sock = ngx.socket.tcp()
    sock:settimeouts(1000, 1000, 1000)
    local ok, err = sock:connect(redis.host, redis.port)
    if not ok then return nil, err end
    ok, err = sock:send(concat(out))
    if not ok then return fail(sock, err) end
    local line
    line, err = sock:receive("*l")
    if not line then return fail(sock, err) end
    local kind, rest = sub(line, 1, 1), sub(line, 2)
    local value
    if kind == "+" or kind == ":" then
        value = rest
    elseif kind == "$" and tonumber(rest) < 0 then
        value = ngx.null
    elseif kind == "$" then
        local data
        data, err = sock:receive(tonumber(rest) + 2)
        if not data then return fail(sock, err) end
        value = sub(data, 1, -3)
    else
        return fail(sock, rest) -- an error reply, or one this example does not parse
    end
    sock:setkeepalive(60000, 32)
    return value
end

return _M
