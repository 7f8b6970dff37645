--- The command line and the environment of the `redlock` command, parsed
-- and checked into one table. Bad usage raises a table {usage = message};
-- nothing here prints, exits or connects. Internal.
local addresses = require "redlock.addresses"
local codes = require "redlock.cli.codes"

local type, tonumber, error, pcall, ipairs, pairs = type, tonumber, error, pcall, ipairs, pairs
local format, match, sub, lower, gmatch, find =
    string.format, string.match, string.sub, string.lower, string.gmatch, string.find
local floor, abs = math.floor, math.abs

local _M = {}

local function usage(fmt, ...) error({ usage = format(fmt, ...) }, 0) end
_M.usage = usage

-- name = { short letter, value placeholder (nil for a flag), env variable }
local SPECS = {
    server = { "s", "URL", "REDLOCK_SERVERS" },
    ttl = { "t", "MS", "REDLOCK_TTL" },
    wait = { "w", "MS", "REDLOCK_WAIT" },
    mode = { "m", "MODE", "REDLOCK_MODE" },
    ["connect-timeout"] = { nil, "MS", "REDLOCK_CONNECT_TIMEOUT" },
    timeout = { nil, "MS", "REDLOCK_TIMEOUT" },
    replicas = { nil, "N", "REDLOCK_REPLICAS" },
    ["replica-timeout"] = { nil, "MS", "REDLOCK_REPLICA_TIMEOUT" },
    ["kill-on-lost"] = { "k", nil, "REDLOCK_KILL_ON_LOST" },
    ["conflict-exit-code"] = { "E", "N", "REDLOCK_CONFLICT_EXIT_CODE" },
    quiet = { "q", nil, "REDLOCK_QUIET" },
    verbose = { "v", nil, "REDLOCK_VERBOSE" },
    tls = { nil, nil, "REDLOCK_TLS" },
    ["tls-ca-file"] = { nil, "FILE", "REDLOCK_TLS_CA_FILE" },
    ["tls-ca-path"] = { nil, "DIR", "REDLOCK_TLS_CA_PATH" },
    ["tls-cert-file"] = { nil, "FILE", "REDLOCK_TLS_CERT_FILE" },
    ["tls-key-file"] = { nil, "FILE", "REDLOCK_TLS_KEY_FILE" },
    ["tls-server-name"] = { nil, "NAME", "REDLOCK_TLS_SERVER_NAME" },
    ["tls-insecure"] = { nil, nil, "REDLOCK_TLS_INSECURE" },
    limit = { nil, "N", "REDLOCK_LIMIT" },
    shared = { nil, nil, "REDLOCK_SHARED" },
    key = { nil, "KEY" },
    help = { "h" },
    version = { "V" },
}
_M.SPECS = SPECS -- spec/61 checks docs/cli.md against it
local SHORT = {}
for name, spec in pairs(SPECS) do
    if spec[1] then SHORT[spec[1]] = name end
end

-- Commands and their words after the options: KEY, then CMD or TOKEN.
local COMMANDS = {
    run = "cmd", try = "cmd?", acquire = "", status = "", release = "token", extend = "token",
}
_M.COMMANDS = COMMANDS

local UNITS = { [""] = 1, ms = 1, s = 1000, m = 60000, h = 3600000 }
local MAX_MS = 2 ^ 53

--- "1500", "1500ms", "1.5s", "2m", "1h" -> whole milliseconds, or nil.
function _M.duration(s)
    local num, unit = match(s, "^(%d*%.?%d*)(%a*)$")
    local scale = num and UNITS[lower(unit)]
    local n = num and tonumber(num)
    if not (scale and n) then return nil end
    local ms = n * scale
    local whole = floor(ms + 0.5)
    if abs(ms - whole) > 1e-6 or whole > MAX_MS then return nil end
    return whole
end

local function set(raw, name, value)
    if name == "server" or name == "key" then
        raw[name][#raw[name] + 1] = value
    else
        raw[name] = value
    end
end

local function take_value(args, i, shown)
    local v = args[i]
    if v == nil then usage("option '%s' needs a value", shown) end
    return v
end

-- Splits args into options (raw) and words (pos). Options end at "--", and
-- for run and try at the first word after KEY: the rest is CMD, untouched.
local function split(args)
    local raw, pos = { server = {}, key = {} }, {}
    local i, stop = 1, false
    while args[i] ~= nil do
        local a = args[i]
        if stop or a == "-" or sub(a, 1, 1) ~= "-" then
            pos[#pos + 1] = a
            local kind = COMMANDS[pos[1]]
            -- (with --key, no KEY word: CMD starts at the second word)
            local at = #raw.key > 0 and 2 or 3
            if not stop and #pos == at and (kind == "cmd" or kind == "cmd?") then stop = true end
        elseif a == "--" then
            stop = true
        elseif sub(a, 1, 2) == "--" then
            local name, value = match(a, "^%-%-([^=]+)=(.*)$")
            name = name or sub(a, 3)
            local spec = SPECS[name]
            if not spec then usage("unknown option '--%s'", name) end
            if spec[2] and not value then
                i = i + 1
                value = take_value(args, i, "--" .. name)
            elseif not spec[2] and value then
                usage("option '--%s' takes no value", name)
            end
            set(raw, name, value or true)
        else
            local j = 2
            while j <= #a do
                local c = sub(a, j, j)
                local name = SHORT[c]
                if not name then usage("unknown option '-%s'", c) end
                if SPECS[name][2] then
                    local value = sub(a, j + 1)
                    if value == "" then
                        i = i + 1
                        value = take_value(args, i, "-" .. c)
                    end
                    set(raw, name, value)
                    break
                end
                set(raw, name, true)
                j = j + 1
            end
        end
        i = i + 1
    end
    return raw, pos
end

-- The value of an option: the command line first, then the environment (an
-- empty variable counts as unset). Returns value, where it came from.
local function lookup(raw, getenv, name)
    local v = raw[name]
    if v ~= nil then return v, "--" .. name end
    local var = SPECS[name][3]
    v = var and getenv(var)
    if v ~= nil and v ~= "" then return v, var end
end

local function ms_option(raw, getenv, name, lo, hi)
    local v, from = lookup(raw, getenv, name)
    if v == nil then return nil end
    local ms = _M.duration(v)
    if not ms then
        usage("%s: expected milliseconds (e.g. 5000, 1500ms, 30s, 2m), got '%s'", from, v)
    end
    if ms < lo or ms > hi then
        usage("%s: expected %d ms to %s, got %d ms", from, lo, hi == MAX_MS and "2^53 ms" or hi .. " ms", ms)
    end
    return ms
end

local TRUE = { ["1"] = true, ["true"] = true, yes = true, on = true }
local FALSE = { ["0"] = true, ["false"] = true, no = true, off = true }

local function flag(raw, getenv, name)
    local v, from = lookup(raw, getenv, name)
    if v == nil or v == true then return v == true end
    if TRUE[lower(v)] then return true end
    if FALSE[lower(v)] then return false end
    usage("%s: expected 1 or 0, got '%s'", from, v)
end

-- A URL fit to print: everything up to its last '@' (user and password,
-- however malformed) is hidden.
local function shown_url(url)
    local at = match(url, "^.*()@")
    if not at then return url end
    return (match(url, "^(%a[%w+.-]*:/*)") or "") .. "***" .. sub(url, at)
end
_M.shown_url = shown_url

local function parse_server(url, from, getenv)
    local ok, server = pcall(addresses.parse_url, url)
    if not ok then
        -- the library's message quotes the URL; this one shows it redacted
        local why = type(server) == "string" and match(server, "%((.-) in \"") or "malformed URL"
        usage("%s: bad server URL '%s': %s", from, shown_url(url), why)
    end
    local password = getenv("REDLOCK_PASSWORD")
    if not server.password and password and password ~= "" then
        server.password = password
        local user = getenv("REDLOCK_USERNAME")
        if user and user ~= "" then server.username = user end
    end
    return server
end

--- REDLOCK_SERVERS into URLs: words apart by commas or spaces, and a word
-- that starts with a scheme (`redis://`, `unix://`, ...) starts a new URL;
-- any other word is one more host of the URL before it, so
-- `redis+cluster://h1:1,h2:2,h3:3` stays one URL (a password's `,` is
-- percent-encoded). A first word without a scheme is a URL of its own,
-- which parse_server then refuses.
function _M.split_servers(s)
    local list = {}
    for word in gmatch(s or "", "[^,%s]+") do
        local n = #list
        if n > 0 and not find(word, "^%a[%w+.-]*://") then
            list[n] = list[n] .. "," .. word
        else
            list[n + 1] = word
        end
    end
    return list
end

local function servers(raw, getenv)
    local list, from = raw.server, "--server"
    if #list == 0 then
        list, from = _M.split_servers(getenv("REDLOCK_SERVERS")), "REDLOCK_SERVERS"
    end
    if #list == 0 then list = { "redis://127.0.0.1:6379" } end
    local out = {}
    for i, url in ipairs(list) do out[i] = parse_server(url, from, getenv) end
    return out
end

-- The tls table for every server (redlock.new's tls option), or nil when
-- no TLS option is set: rediss:// URLs then use the system's CA store.
local TLS_FIELDS = {
    ca_file = "tls-ca-file", ca_path = "tls-ca-path", cert_file = "tls-cert-file",
    key_file = "tls-key-file", server_name = "tls-server-name",
}

local function tls(raw, getenv)
    local t, any = {}, flag(raw, getenv, "tls")
    for field, name in pairs(TLS_FIELDS) do
        local v = lookup(raw, getenv, name)
        if v ~= nil then t[field], any = v, true end
    end
    if flag(raw, getenv, "tls-insecure") then t.verify, any = false, true end
    if not any then return nil end
    if (t.cert_file == nil) ~= (t.key_file == nil) then
        usage("--tls-cert-file and --tls-key-file go together")
    end
    return t
end

--- Parses the words after the program name. getenv(name) reads the
-- environment. Returns {help = true}, {version = true} or the command:
-- {command, key, keys (several --key: a group lock), limit, cmd | token,
-- servers, ttl, wait, mode, connect_timeout,
-- timeout, replicas, replica_timeout, kill_on_lost, conflict_code, quiet, verbose,
-- tls}; unset numbers are nil (the
-- library's defaults apply). Raises {usage = message}.
function _M.parse(args, getenv)
    local raw, pos = split(args)
    if raw.help or pos[1] == "help" then return { help = true } end
    if raw.version then return { version = true } end
    local command = pos[1]
    if not command then usage("missing command") end
    local kind = COMMANDS[command]
    if not kind then usage("unknown command '%s'", command) end
    -- the keys: KEY, or every --key (a group lock of them when several)
    local keys, w = raw.key, 2
    if #keys == 0 then
        keys, w = { pos[2] }, 3
        if keys[1] == nil then usage("%s: missing KEY", command) end
    end
    local seen = {}
    for _, k in ipairs(keys) do
        if k == "" then usage("%s: KEY must not be empty", command) end
        if seen[k] then usage("%s: key '%s' given twice", command, k) end
        seen[k] = true
    end
    local cfg = { command = command, key = keys[1], keys = #keys > 1 and keys or nil }
    if kind == "cmd" or kind == "cmd?" then
        if pos[w] == nil and kind == "cmd" then
            usage("%s: missing CMD (redlock %s KEY -- CMD [ARGS...])", command, command)
        end
        if pos[w] ~= nil then
            cfg.cmd = {}
            for i = w, #pos do cfg.cmd[i - w + 1] = pos[i] end
        end
    elseif kind == "token" then
        if pos[w] == nil or pos[w] == "" then usage("%s: missing TOKEN", command) end
        if pos[w + 1] ~= nil then usage("%s: unexpected word '%s' after TOKEN", command, pos[w + 1]) end
        cfg.token = pos[w]
    elseif pos[w] ~= nil then
        usage("%s: unexpected word '%s' after %s", command, pos[w], w == 3 and "KEY" or "the options")
    end
    local limit, lfrom = lookup(raw, getenv, "limit")
    if limit ~= nil then
        local n = match(limit, "^%d+$") and tonumber(limit)
        if not n or n < 1 or n > 1000000 then usage("%s: expected 1 to 1000000, got '%s'", lfrom, limit) end
        if cfg.keys then usage("%s: a semaphore has one key, not %d", lfrom, #cfg.keys) end
        cfg.limit = n
    end
    cfg.shared = flag(raw, getenv, "shared")
    if cfg.shared and (cfg.limit or cfg.keys) then
        usage("--shared takes one key and no --limit")
    end

    cfg.ttl = ms_option(raw, getenv, "ttl", 1, MAX_MS)
    cfg.wait = ms_option(raw, getenv, "wait", 0, MAX_MS)
    cfg.connect_timeout = ms_option(raw, getenv, "connect-timeout", 1, 86400000)
    cfg.timeout = ms_option(raw, getenv, "timeout", 1, 86400000)
    cfg.replica_timeout = ms_option(raw, getenv, "replica-timeout", 1, 86400000)
    local replicas, rfrom = lookup(raw, getenv, "replicas")
    if replicas ~= nil then
        local n = match(replicas, "^%d+$") and tonumber(replicas)
        if not n or n > 1000000 then usage("%s: expected 0 to 1000000, got '%s'", rfrom, replicas) end
        cfg.replicas = n
    end
    local mode, from = lookup(raw, getenv, "mode")
    if mode ~= nil and mode ~= "auto" and mode ~= "script" and mode ~= "legacy" then
        usage("%s: expected auto, script or legacy, got '%s'", from, mode)
    end
    cfg.mode = mode
    local code
    code, from = lookup(raw, getenv, "conflict-exit-code")
    if code ~= nil then
        local n = match(code, "^%d+$") and tonumber(code)
        -- (one check, one message: codes.free is the rule)
        if not n or not codes.free(n) then
            usage("%s: expected a status redlock gives for nothing else (free: 1-63, 65-68, 72-74,"
                .. " 78-125), got '%s'", from, code)
        end
        cfg.conflict_code = n
    end
    cfg.kill_on_lost = flag(raw, getenv, "kill-on-lost")
    cfg.quiet = flag(raw, getenv, "quiet")
    cfg.verbose = flag(raw, getenv, "verbose")
    cfg.servers = servers(raw, getenv)
    cfg.tls = tls(raw, getenv)
    if cfg.tls then
        -- the options replace a rediss:// URL's own "system CA store" table
        for _, server in ipairs(cfg.servers) do
            if not server.path then server.tls = cfg.tls end
        end
    end
    return cfg
end

return _M
