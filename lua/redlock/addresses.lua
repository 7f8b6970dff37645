--- The servers' addresses of redlock.new (opts.servers): URLs (redis://,
-- rediss://, unix://, redis+sentinel://, redis+cluster://) and tables,
-- checked into server tables (host/port/path, sentinels, cluster,
-- credentials, db, TLS), and the TLS table. Runs once per client.
local tonumber, tostring, type, pairs, ipairs = tonumber, tostring, type, pairs, ipairs
local error, format, floor = error, string.format, math.floor
local find, match, gsub, char = string.find, string.match, string.gsub, string.char

local _M = {}

local SERVER_FIELDS = {
    host = "string", port = "number", path = "string", username = "string",
    password = "string", db = "number", connect_timeout = "number", timeout = "number",
    tls = "table",
    -- Sentinel (the names are the contract): the master's address comes
    -- from these sentinels; username, password, db and tls are the data
    -- nodes', sentinel_* the sentinels' own
    sentinels = "table", master_name = "string", sentinel_username = "string",
    sentinel_password = "string", sentinel_tls = "table", sentinel_check = "number",
    -- Redis Cluster (the name is the contract): seed nodes, "host[:port]"
    cluster = "table",
}

--- The fields a server table may have, and their types (spec/61 checks
-- that docs/api.md lists exactly these).
_M.SERVER_FIELDS = SERVER_FIELDS

local SENTINEL_PORT = 26379

-- The fields of a tls table (the names are the contract) and their types.
local TLS_FIELDS = {
    ca_file = "string", ca_path = "string", cert_file = "string", key_file = "string",
    server_name = "string", verify = "boolean",
}
_M.TLS_FIELDS = TLS_FIELDS

--- Checks a tls table; returns a copy with verify set (true unless false).
-- what names it in the error ("option 'tls' to 'new'", ...).
function _M.check_tls(t, what, level)
    if type(t) ~= "table" then
        error(format("bad %s (table expected, got %s)", what, type(t)), level)
    end
    local copy = {}
    for k, v in pairs(t) do
        local want = TLS_FIELDS[k]
        if not want then
            error(format("bad %s (unknown field '%s' in tls)", what, tostring(k)), level)
        end
        if type(v) ~= want then
            error(format("bad %s (field '%s' of tls: %s expected, got %s)", what, k, want, type(v)),
                level)
        end
        copy[k] = v
    end
    if (copy.cert_file == nil) ~= (copy.key_file == nil) then
        error(format("bad %s (tls: cert_file and key_file go together)", what), level)
    end
    if copy.verify == nil then copy.verify = true end
    return copy
end

local function unescape(s)
    return (gsub(s, "%%(%x%x)", function(h) return char(tonumber(h, 16)) end))
end

-- A URL fit for an error message: everything between the scheme and the
-- last '@' goes (a lone word before '@' is a password too, and a password
-- may hold '/' or '@' when it was not %-encoded), whatever the scheme
-- (RFC 3986: a letter, then letters, digits, '+', '-', '.'; "rediss",
-- "redis+sentinel") or none at all.
local function redact(url)
    if not find(url, "@", 1, true) then return url end
    local scheme = match(url, "^%a[%w+.-]*://") or ""
    return scheme .. "***@" .. match(url, "^.*@(.*)$")
end

local function bad_url(url, why)
    error(format("bad option 'servers' to 'new' (%s in %q)", why, redact(url)), 5)
end

local function parse_db(url, s)
    local db = tonumber(s)
    if not db or db < 0 or db ~= floor(db) then bad_url(url, "bad database number") end
    return db
end

-- Takes "[user[:password]@]" off rest into server; returns what follows.
local function userinfo(server, rest)
    local info, hostpart = match(rest, "^([^@/]*)@(.*)$")
    if not info then return rest end
    local user, pass = match(info, "^([^:]*):(.*)$")
    if user then
        if user ~= "" then server.username = unescape(user) end
        server.password = unescape(pass)
    elseif info ~= "" then
        -- "redis://secret@host": a lone word is the password, as in redis-cli
        server.password = unescape(info)
    end
    return hostpart
end

-- "host[:port]" or "[v6]:port" into host, port (default port); nil when
-- it is neither.
-- {host=, port=} appended to nodes unless it is there already: a Cluster
-- seed or a sentinel named twice is one node (each driver keeps one
-- connection per address).
local function add_node(nodes, host, port)
    for _, n in ipairs(nodes) do
        if n.host == host and n.port == port then return end
    end
    nodes[#nodes + 1] = { host = host, port = port }
end

-- An IPv6 address in brackets: no bracket, slash or @ inside it.
local V6 = "^%[([^%]%[/@]+)%]"

local function host_port(s, default)
    local host, port
    if find(s, "^%[") then
        host, port = match(s, V6 .. ":?(%d*)$")
    else
        host, port = match(s, "^([^:/@,?#%[%]]+):?(%d*)$")
    end
    if not host then return nil end
    port = port ~= "" and tonumber(port) or default
    if port < 1 or port > 65535 then return nil end
    return host, port
end
_M.host_port = host_port

--- Parses "redis+sentinel://[user[:password]@]host[:port][,host[:port]...]
-- /master-name[/db]" (rediss+sentinel://: TLS to the sentinels and the data
-- nodes) into a server table whose sentinels are {host=, port=} tables.
-- The credentials are the data nodes'; sentinels that want their own take
-- the table form's sentinel_username and sentinel_password.
function _M.parse_sentinel_url(url)
    local s, rest = match(url, "^redis(s?)%+sentinel://(.*)$")
    local server = { sentinels = {} }
    if s == "s" then
        server.tls, server.sentinel_tls = { verify = true }, { verify = true }
    end
    rest = userinfo(server, rest)
    local hosts, name, db = match(rest, "^([^/]+)/([^/]+)/?(%d*)$")
    if not hosts then bad_url(url, "expected host[:port][,host[:port]...]/master-name[/db]") end
    for part in string.gmatch(hosts, "[^,]+") do
        local host, port = host_port(part, SENTINEL_PORT)
        if not host then bad_url(url, "bad sentinel address") end
        add_node(server.sentinels, host, port)
    end
    if #server.sentinels == 0 then bad_url(url, "no sentinel") end
    server.master_name = unescape(name)
    if find(server.master_name, "%z") then bad_url(url, "a NUL byte in the master name") end
    if db ~= "" then server.db = parse_db(url, db) end
    return server
end

--- Parses "redis+cluster://[user[:password]@]host[:port][,host[:port]...]"
-- (rediss+cluster://: TLS) into a server table whose cluster is a list of
-- seed {host=, port=} tables. A Cluster has database 0 only: no /db.
function _M.parse_cluster_url(url)
    local s, rest = match(url, "^redis(s?)%+cluster://(.*)$")
    local server = { cluster = {} }
    if s == "s" then server.tls = { verify = true } end
    rest = userinfo(server, rest)
    rest = match(rest, "^(.-)/?$")
    if find(rest, "/", 1, true) then
        bad_url(url, "a Cluster has no database number: host[:port],... expected")
    end
    for part in string.gmatch(rest, "[^,]+") do
        local host, port = host_port(part, 6379)
        if not host then bad_url(url, "bad node address") end
        add_node(server.cluster, host, port)
    end
    if #server.cluster == 0 then bad_url(url, "no node") end
    return server
end

--- Parses "redis://[user[:password]@]host[:port][/db]" (or rediss://, TLS)
-- or "unix:///path[?db=N]" into a server table.
function _M.parse_url(url)
    if find(url, "^unix://") then
        local path, query = match(url, "^unix://([^?]+)%??(.*)$")
        if not path or path == "" then bad_url(url, "missing socket path") end
        local server = { path = unescape(path) }
        if query ~= "" then
            local db = match(query, "^db=(%d+)$")
            if not db then bad_url(url, "only ?db=N may follow the path") end
            server.db = parse_db(url, db)
        end
        return server
    end
    if find(url, "^rediss?%+sentinel://") then return _M.parse_sentinel_url(url) end
    if find(url, "^rediss?%+cluster://") then return _M.parse_cluster_url(url) end
    local s, rest = match(url, "^redis(s?)://(.*)$")
    if not rest then
        bad_url(url, "expected redis://, rediss://, redis+sentinel://, redis+cluster:// or unix://")
    end
    local server = {}
    -- rediss:// alone: the system's CA store, verify on (a client's tls
    -- table, if any, replaces this one: see _M.servers)
    if s == "s" then server.tls = { verify = true } end
    rest = userinfo(server, rest)
    local host, port, db
    if find(rest, "^%[") then
        host, port, db = match(rest, V6 .. ":?(%d*)/?(%d*)$")
    else
        host, port, db = match(rest, "^([^:/@]+):?(%d*)/?(%d*)$")
    end
    if not host then bad_url(url, "expected host[:port][/db]") end
    server.host = host
    if port ~= "" then
        server.port = tonumber(port)
        if server.port < 1 or server.port > 65535 then bad_url(url, "port out of range") end
    end
    if db ~= "" then server.db = parse_db(url, db) end
    return server
end

-- "host[:port]" strings or {host=, port=} tables (a parsed URL's) into
-- {host=, port=} tables; nil, the position of a bad one.
local function address_list(list, default)
    local out = {}
    for j, addr in ipairs(list) do
        local host, port
        if type(addr) == "string" then
            host, port = host_port(addr, default)
        elseif type(addr) == "table" and type(addr.host) == "string" and addr.host ~= "" then
            host, port = addr.host, addr.port or default
            if type(port) ~= "number" or port < 1 or port > 65535 or port ~= floor(port) then host = nil end
        end
        if not host then return nil, j end
        add_node(out, host, port)
    end
    return out
end

-- Raises for server #i of opts.servers (a table's field; level: the
-- caller of redlock.new).
local function bad_server(i, why)
    error(format("bad option 'servers' to 'new' (server #%d: %s)", i, why), 6)
end

-- What a Sentinel's table and a Cluster's differ in: their nodes' default
-- port, the field they exclude besides host, port and path, their words.
local NODE_TABLES = {
    sentinels = { port = SENTINEL_PORT, other = "cluster", one = "sentinel", many = "sentinels",
                  excludes = "sentinels replace host, port, path and cluster" },
    cluster = { port = 6379, other = "sentinels", one = "cluster node", many = "cluster nodes",
                excludes = "cluster replaces host, port, path and sentinels" },
}

-- { sentinels = {"host:port", ...}, master_name =, ... } or { cluster =
-- {"host:port", ...}, ... } (the seed nodes of a Redis Cluster), its
-- fields checked for their types already: a copy, its nodes as
-- {host=, port=} tables.
local function check_node_table(t, i, field)
    local kind = NODE_TABLES[field]
    local function bad_field(why) bad_server(i, why) end
    if t.host or t.path or t.port or t[kind.other] then bad_field(kind.excludes) end
    if field == "sentinels" then
        if not t.master_name or t.master_name == "" or find(t.master_name, "%z") then
            bad_field("sentinels need a master_name (non-empty, no NUL byte)")
        end
    elseif t.db and t.db ~= 0 then
        bad_field("a Cluster has database 0 only")
    end
    if #t[field] == 0 or #t[field] > 64 then bad_field(format("1 to 64 %s expected", kind.many)) end
    local nodes, bad_at = address_list(t[field], kind.port)
    if not nodes then bad_field(format("%s #%d: \"host[:port]\" expected", kind.one, bad_at)) end
    local copy = {}
    for k, v in pairs(t) do copy[k] = v end
    copy[field] = nodes
    local what = format("option 'servers' to 'new' (server #%d)", i)
    if copy.tls then copy.tls = _M.check_tls(copy.tls, what, 6) end
    if field == "cluster" then
        copy.db = nil
        return copy
    end
    if copy.sentinel_tls then copy.sentinel_tls = _M.check_tls(copy.sentinel_tls, what, 6) end
    local check = copy.sentinel_check
    if check and (check < 1 or check ~= floor(check) or check > 86400000) then
        bad_field("sentinel_check: positive integer (ms) expected")
    end
    return copy
end

--- The table core.conn takes for a Sentinel-managed server: each sentinel
-- with the sentinels' credentials and TLS.
function _M.sentinel_conn_spec(spec)
    local nodes = {}
    for j, node in ipairs(spec.sentinels) do
        nodes[j] = { host = node.host, port = node.port, username = spec.sentinel_username,
                     password = spec.sentinel_password, tls = spec.sentinel_tls }
    end
    local out = {}
    for k, v in pairs(spec) do out[k] = v end
    out.sentinels = nodes
    out.sentinel_username, out.sentinel_password, out.sentinel_tls = nil, nil, nil
    return out
end

local function check_server_table(t, i)
    for k, v in pairs(t) do
        local want = SERVER_FIELDS[k]
        if not want then
            error(format("bad option 'servers' to 'new' (unknown field '%s' in server #%d)",
                tostring(k), i), 4)
        end
        if type(v) ~= want then
            error(format("bad option 'servers' to 'new' (field '%s' of server #%d: %s expected, got %s)",
                k, i, want, type(v)), 4)
        end
    end
    if t.sentinels then return check_node_table(t, i, "sentinels") end
    if t.cluster then return check_node_table(t, i, "cluster") end
    if not t.host and not t.path then
        error(format("bad option 'servers' to 'new' (server #%d needs host or path)", i), 4)
    end
    local copy = {}
    for k, v in pairs(t) do copy[k] = v end
    if copy.tls then
        copy.tls = _M.check_tls(copy.tls, format("option 'servers' to 'new' (server #%d)", i), 5)
    end
    return copy
end

--- Checks opts.servers and returns a list of server tables. tls: the
-- client's checked tls table, for every server that has none (a rediss://
-- URL takes it too: its own is only "verify with the system's CA store").
function _M.parse(list, tls)
    if list == nil then return { { host = "127.0.0.1", port = 6379 } } end
    if type(list) == "string" then list = { list } end
    if type(list) ~= "table" or #list == 0 then
        error("bad option 'servers' to 'new' (non-empty list of URLs or tables expected)", 3)
    end
    if #list > 64 then error("bad option 'servers' to 'new' (at most 64 servers)", 3) end
    local out = {}
    for i, s in ipairs(list) do
        if type(s) == "string" then
            out[i] = _M.parse_url(s)
            if tls then
                out[i].tls = tls
                -- rediss+sentinel://: the sentinels take it too
                if out[i].sentinel_tls then out[i].sentinel_tls = tls end
            end
        elseif type(s) == "table" then
            out[i] = check_server_table(s, i)
        else
            error(format("bad option 'servers' to 'new' (server #%d: URL or table expected, got %s)",
                i, type(s)), 3)
        end
    end
    if tls then
        for _, server in ipairs(out) do
            if server.tls == nil and server.path == nil then server.tls = tls end
        end
    end
    return out
end

return _M
