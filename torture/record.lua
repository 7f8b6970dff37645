--- The history's records: one line each, tab-separated `name=value`
-- fields, the first `ev=<event>`; each process appends to a file of its
-- own (flushed per line), and the checker reads them all back.
local format, gsub, concat = string.format, string.gsub, table.concat
local type, tostring, floor = type, tostring, math.floor

local _M = {}

local function value(v)
    if type(v) == "number" then
        if v == floor(v) and v > -1e15 and v < 1e15 then return format("%.0f", v) end
        return format("%.3f", v)
    end
    return (gsub(tostring(v), "[%%\t\n\r]", function(c) return format("%%%02X", c:byte()) end))
end

--- A line from a list of alternating names and values (nil values left
-- out: the list may have holes).
function _M.encode(fields)
    local out, n = {}, 0
    for i in pairs(fields) do
        if type(i) == "number" and i > n then n = i end
    end
    for i = 1, n, 2 do
        local v = fields[i + 1]
        if v ~= nil then out[#out + 1] = fields[i] .. "=" .. value(v) end
    end
    return concat(out, "\t")
end

--- A record (a table of strings) from a line.
function _M.decode(line)
    local t = {}
    for field in line:gmatch("[^\t]+") do
        local k, v = field:match("^([^=]*)=(.*)$")
        if k then t[k] = (gsub(v, "%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end)) end
    end
    return t
end

--- A writer appending to path: w(fields) writes one record.
function _M.writer(path)
    local f = assert(io.open(path, "a"))
    f:setvbuf("no")
    return function(fields)
        f:write(_M.encode(fields), "\n")
        f:flush()
    end, f
end

--- Every record of a file, in order.
function _M.read(path)
    local out = {}
    local f = io.open(path)
    if not f then return out end
    for line in f:lines() do
        if line ~= "" then out[#out + 1] = _M.decode(line) end
    end
    f:close()
    return out
end

--- Every record of a history directory (its *.log files, one per process).
function _M.read_dir(dir)
    local out = {}
    local ls = io.popen("ls " .. dir)
    for file in ls:lines() do
        if file:match("%.log$") then
            for _, r in ipairs(_M.read(dir .. "/" .. file)) do out[#out + 1] = r end
        end
    end
    ls:close()
    return out
end

--- Lua source text for a plain table (strings, numbers, booleans,
-- tables), read back with dofile / load: the run's configuration, which
-- every client process loads.
function _M.dump(v, indent)
    indent = indent or ""
    if type(v) == "table" then
        local keys = {}
        for k in pairs(v) do keys[#keys + 1] = k end
        table.sort(keys, function(a, b)
            if type(a) == type(b) then return a < b end
            return type(a) == "number"
        end)
        local out = { "{\n" }
        for _, k in ipairs(keys) do
            local name = type(k) == "string" and k:match("^[%a_][%w_]*$") and k or ("[" .. _M.dump(k) .. "]")
            out[#out + 1] = indent .. "  " .. name .. " = " .. _M.dump(v[k], indent .. "  ") .. ",\n"
        end
        out[#out + 1] = indent .. "}"
        return concat(out)
    elseif type(v) == "string" then
        return format("%q", v)
    elseif type(v) == "number" then
        if v == floor(v) then return format("%.0f", v) end
        return format("%.17g", v)
    end
    return tostring(v)
end

return _M
