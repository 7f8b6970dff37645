--- The `redlock` command: flock(1) for many hosts, on Redis locks.
--
--    redlock run [options] KEY [--] CMD [ARGS...]
--
-- bin/redlock calls main(arg) and exits with what it returns. main never
-- raises and never exits, so specs can call it in-process.
-- @module redlock.cli
local redlock = require "redlock"
local core = require "redlock.core"
local args_mod = require "redlock.cli.args"
local codes = require "redlock.cli.codes"
local run_mod = require "redlock.cli.run"
local scripted = require "redlock.scripted"
local semaphore = require "redlock.semaphore"
local group = require "redlock.group"
local shared = require "redlock.shared"
local notify = require "redlock.notify"

local format, match, find, gsub, sub = string.format, string.match, string.find, string.gsub, string.sub
local show_key = require("redlock.util").show_key
local type, tostring, tonumber, ipairs, pcall = type, tostring, tonumber, ipairs, pcall
local floor, max = math.floor, math.max

local _M = {}

_M.USAGE = [=[
usage: redlock run [options] KEY [--] CMD [ARGS...]
       redlock try [options] KEY [[--] CMD [ARGS...]]
       redlock acquire [options] KEY
       redlock status [options] KEY
       redlock release [options] KEY TOKEN
       redlock extend [options] KEY TOKEN
       (several keys at once: --key KEY for each, instead of KEY)
]=]

_M.HELP = _M.USAGE .. [=[

Runs CMD only while holding the Redis lock KEY: flock(1) across processes
and machines.

Commands:
  run      wait up to --wait for the lock, run CMD while renewing the lock
           every ttl/3, release it when CMD ends; exit with CMD's status
  try      the same with one attempt, no waiting; without CMD, take the lock
           and print its token (it lasts --ttl unless extended or released)
  acquire  wait up to --wait, take the lock and print its token
  status   whether KEY is held: token prefix, remaining ms, fence, waiters;
           a semaphore's permits and readers, each with its remaining ms
  release  release KEY if TOKEN still holds it
  extend   give KEY a new --ttl if TOKEN still holds it

Options ([VARIABLE]: the same from the environment; options win):
  -s, --server URL   Redis server; repeat it for several (2 or more: a
                     Redlock quorum of a majority; 3 or more keep
                     locking with one down) [REDLOCK_SERVERS: comma or space
                     separated; a new URL starts at each scheme, so
                     redis+cluster://h1,h2,h3 is one]; default
                     redis://127.0.0.1:6379
                     URL: redis://[user[:password]@]host[:port][/db]
                          rediss://... (TLS, the system's CA store)
                          or unix:///path/to/redis.sock[?db=N]
  -t, --ttl MS       lock lifetime (default 10000) [REDLOCK_TTL]
  -w, --wait MS      how long run and acquire wait for the lock
                     (default 10000) [REDLOCK_WAIT]
  -m, --mode MODE    auto, script or legacy (default auto) [REDLOCK_MODE]
      --limit N      a counting semaphore: at most N holders of KEY at
                     once, each with a permit of its own [REDLOCK_LIMIT]
      --shared       a reader: readers of KEY hold it together, a writer
                     (without --shared) alone; a waiting writer keeps
                     later readers out [REDLOCK_SHARED=1]
      --key KEY      a key of a group lock: repeat it for each key, all
                     taken at once or none (no deadlock, whatever the
                     order); replaces the KEY word
      --connect-timeout MS   (default 1000) [REDLOCK_CONNECT_TIMEOUT]
      --timeout MS   for each Redis command (default 1000) [REDLOCK_TIMEOUT]
      --replicas N   acquire and extend wait until N replicas have the lock
                     (WAIT), and fail (releasing it) if they do not
                     (default 0: no wait) [REDLOCK_REPLICAS]
      --replica-timeout MS   how long that waits (default 1000)
                     [REDLOCK_REPLICA_TIMEOUT]
  -k, --kill-on-lost if the lock is lost, SIGTERM CMD (SIGKILL 5 s later);
                     on Linux CMD also gets SIGTERM if redlock dies
                     [REDLOCK_KILL_ON_LOST=1]
  -E, --conflict-exit-code N
                     exit status when the lock is not acquired (default 1;
                     one redlock gives for nothing else: 1-63, 65-68,
                     72-74, 78-125) [REDLOCK_CONFLICT_EXIT_CODE]
  -q, --quiet        no messages on stderr [REDLOCK_QUIET=1]
  -v, --verbose      print each lock event (acquired, extended, released,
                     lost, ...) on stderr [REDLOCK_VERBOSE=1]
      --tls          TLS to every server, even redis:// URLs [REDLOCK_TLS=1]
                     (any --tls-* option implies it)
      --tls-ca-file FILE, --tls-ca-path DIR   the CAs to trust instead of
                     the system's [REDLOCK_TLS_CA_FILE, REDLOCK_TLS_CA_PATH]
      --tls-cert-file FILE, --tls-key-file FILE   a client certificate
                     [REDLOCK_TLS_CERT_FILE, REDLOCK_TLS_KEY_FILE]
      --tls-server-name NAME  the name the server's certificate must carry
                     (default: the URL's host) [REDLOCK_TLS_SERVER_NAME]
      --tls-insecure no certificate checks: UNSAFE, anyone on the path can
                     pose as the server [REDLOCK_TLS_INSECURE=1]
  -h, --help         this text
  -V, --version      the version
  MS takes a unit if you like: 500ms, 30s, 5m, 1h.
  Passwords: in the URL, or REDLOCK_PASSWORD (and REDLOCK_USERNAME) for
  servers whose URL has none. redlock never prints them.

CMD runs with REDLOCK_KEY, REDLOCK_TOKEN, REDLOCK_FENCE and REDLOCK_TTL set
(a group lock: REDLOCK_KEY its first key, REDLOCK_KEYS and REDLOCK_FENCES
its keys and their fences, one per line, in the order given).
SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1 and SIGUSR2 are passed on to CMD.

Exit status:
  0        success; run and try pass CMD's own status through
  1        not acquired: held elsewhere, or --wait ran out (see -E);
           status: KEY is free; release, extend: TOKEN does not hold KEY
  64       bad usage
  69       Redis unreachable, too few servers answered (no quorum), or
           too few replicas acknowledged (--replicas)
  70       internal error
  71       could not start CMD (fork failed)
  75       the lock was lost while CMD ran
  76       Redis answered with an error
  77       Redis refused the credentials or the command
  126, 127 CMD could not be executed, or was not found
  128+N    CMD was killed by signal N
]=]

-- --verbose: one line per event (docs/events.md) on err.
local function event_printer(err)
    return function(ev)
        local parts = { "redlock: event ", ev.type, " ", ev.key }
        for _, field in ipairs { "server", "waited", "attempts", "fence", "code", "err" } do
            local v = ev[field]
            if v ~= nil then parts[#parts + 1] = format(" %s=%s", field, tostring(v)) end
        end
        parts[#parts + 1] = "\n"
        err:write(table.concat(parts))
    end
end

local function make_client(cfg, err)
    local ok, client = pcall(redlock.new, {
        on_event = cfg.verbose and event_printer(err) or nil,
        servers = cfg.servers,
        ttl = cfg.ttl,
        wait = cfg.wait,
        mode = cfg.mode,
        connect_timeout = cfg.connect_timeout,
        timeout = cfg.timeout,
        replicas = cfg.replicas,
        replica_timeout = cfg.replica_timeout,
        tls = cfg.tls,
    })
    if not ok then
        -- cut "file:line: "; the checked options hold no password here
        args_mod.usage("%s", (gsub(tostring(client), "^[^:]*:%d+: ", "")))
    end
    return client
end

local function fail(ctx, msg, word)
    ctx.say(msg)
    return codes.of(msg, word, ctx.cfg.conflict_code)
end

-- --limit with several servers: bad usage (the library refuses a
-- semaphore over Redlock, see docs/guarantees.md), for every command.
local function limit_usable(client, cfg)
    if cfg.limit and #client.servers >= 2 then
        args_mod.usage("--limit over several servers (Redlock) is refused: N permits on each server do not"
            .. " bound the holders to N")
    end
end

local function acquire(ctx, once)
    local client, cfg = ctx.client, ctx.cfg
    local key, opts = cfg.keys or cfg.key, nil
    limit_usable(client, cfg)
    if cfg.limit then opts = { limit = cfg.limit } elseif cfg.shared then opts = { shared = true } end
    if once then return client:try_acquire(key, opts) end
    return client:acquire(key, opts)
end

-- run, try: with CMD, run it under the lock; try without CMD prints the
-- token like acquire.
local function cmd_run(ctx)
    local cfg = ctx.cfg
    local lock, err, word = acquire(ctx, cfg.command == "try")
    if not lock then return fail(ctx, err, word) end
    if not cfg.cmd then
        ctx.out:write(lock.token, "\n")
        return codes.OK
    end
    return run_mod.run(cfg, lock, ctx.say)
end

local function cmd_acquire(ctx)
    local lock, err, word = acquire(ctx, false)
    if not lock then return fail(ctx, err, word) end
    ctx.out:write(lock.token, "\n")
    return codes.OK
end

-- release and extend by token: the strategy's own operations, so that
-- several servers are handled as the client handles them (the kind's as
-- acquire picks them: redlock.lua kind_opts).
local function by_token(ctx, op)
    local client, cfg = ctx.client, ctx.cfg
    local key = cfg.keys or cfg.key
    local strategy, several = client.strategy, #client.servers >= 2
    if cfg.shared then
        strategy = several and shared.quorum or shared.strategy
    elseif cfg.keys then
        strategy = several and group.quorum or group.strategy
    elseif cfg.limit then
        limit_usable(client, cfg) -- (no semaphore is ever taken there)
        strategy = semaphore.strategy(cfg.limit)
    end
    local ok, where, word
    if op == "release" then
        ok, where, word = strategy.release(client, key, cfg.token)
    else
        ok, where, word = strategy.extend(client, key, cfg.token, client.opts.ttl, client.opts.rep)
    end
    if ok then return codes.OK end
    if ok == false then
        return fail(ctx, format("not owner: %s is not held by that token on %s",
            show_key(key), where), "not owner")
    end
    return fail(ctx, format("%s (%s %s)", where, op == "release" and "releasing" or "extending",
        show_key(key)), word)
end

local function scripting_missing(err)
    return find(err, "unknown command", 1, true) or find(err, "NOSCRIPT", 1, true)
end

-- value, pttl, fence, waiters of key on one server: the status script
-- reads them atomically (a semaphore's value: {limit, token, ms, ...});
-- legacy mode (or a server without scripting) reads the first three with
-- plain commands.
local function read_status(server, key, mode)
    local fkey = scripted.fence_key(key, server.slot_fences)
    if mode ~= "legacy" then
        local r, err, word = server:eval("status", 3, key, fkey, notify.waiters_key(key))
        if r ~= nil then return r[1], r[2], r[3], r[4] end
        if not (word == "server" and mode == "auto" and scripting_missing(err)) then
            return nil, err, word
        end
    end
    local replies = {}
    for i, cmd in ipairs({ { "GET", key }, { "PTTL", key }, { "TYPE", fkey } }) do
        local r, err, word = server:call(cmd[1], cmd[2])
        if r == nil then return nil, err, word end
        replies[i] = r
    end
    -- the counter: a stream's last ID (Redis 5.0+), or a string
    local last = 0
    if replies[3] == "stream" then
        local info = server:call("XINFO", "STREAM", fkey)
        for i = 1, type(info) == "table" and #info - 1 or 0, 2 do
            if info[i] == "last-generated-id" then
                local ms, seq = match(info[i + 1], "^(%d+)%-(%d+)$")
                last = core.fence_of(ms .. "-" .. (tonumber(seq) < 100 and seq or "99")) or 0
            end
        end
    elseif replies[3] == "string" then
        last = tonumber((server:call("GET", fkey))) or 0
    end
    return replies[1], replies[2], last
end

local function printable(s) return (gsub(s, "[^%w%p]", "?")) end

local function status_line(server, value, pttl, fence, waiters)
    local tail = waiters and waiters > 0 and format(" waiters=%d", waiters) or ""
    if type(value) == "table" then
        if value[1] == 0 then
            return format("other server=%s (not a lock: another kind of value)", server.name), true
        end
        -- a semaphore (its permits) or readers, earliest expiry first
        local each = value[1] == -1 and "reader" or "permit"
        local lines = { each == "reader"
            and format("readers server=%s held=%d%s fence=%s", server.name, (#value - 1) / 2, tail,
                tostring(fence))
            or format("permits server=%s limit=%d held=%d%s fence=%s", server.name, value[1],
                (#value - 1) / 2, tail, tostring(fence)) }
        for i = 2, #value, 2 do
            lines[#lines + 1] = format("  %s token=%s remaining_ms=%d", each, printable(sub(value[i], 1, 8)),
                value[i + 1])
        end
        return table.concat(lines, "\n"), #value > 1
    end
    if type(value) ~= "string" then
        return format("free server=%s%s fence=%s", server.name, tail, tostring(fence)), false
    end
    local token = value
    -- legacy mode stores "<expiry as unix ms>:<token>" (script-mode tokens
    -- are hex, without ':')
    local expiry, rest = match(value, "^(%d+):(.+)$")
    if expiry then
        token = rest
        if pttl < 0 then pttl = max(0, floor(tonumber(expiry) - core.time())) end
    end
    return format("held server=%s token=%s remaining_ms=%d%s fence=%s",
        server.name, printable(sub(token, 1, 8)), pttl, tail, tostring(fence)), true
end

-- One key's status on every server: OK (held on a majority), NO (free on
-- a majority), or an error's code.
local function key_status(ctx, key, label)
    local servers = ctx.client.servers
    local held, answered, first_err, first_word = 0, 0, nil, nil
    for _, server in ipairs(servers) do
        local value, pttl, fence, waiters = read_status(server, key, server.mode)
        if value == nil then
            ctx.say(format("%s (reading %s)", pttl, show_key(key)))
            first_err, first_word = first_err or pttl, first_word or fence
        else
            answered = answered + 1
            local line, is_held = status_line(server, value, pttl, fence, waiters)
            if is_held then held = held + 1 end
            if not ctx.cfg.quiet then ctx.out:write(label, line, "\n") end
        end
    end
    local quorum = floor(#servers / 2) + 1
    if held >= quorum then return codes.OK end
    if answered - held >= quorum then return codes.NO end
    if first_err then return codes.of(first_err, first_word) end
    return codes.UNAVAILABLE -- answered, but split: neither held nor free on a majority
end

-- status: of KEY, or of every --key (one block per key, each line
-- starting "key=<key> "; OK when every key is held, NO when none is).
local function cmd_status(ctx)
    local keys = ctx.cfg.keys
    if not keys then return key_status(ctx, ctx.cfg.key, "") end
    local held, free, other = 0, 0, nil
    for _, key in ipairs(keys) do
        local code = key_status(ctx, key, format("key=%s ", printable(key)))
        if code == codes.OK then
            held = held + 1
        elseif code == codes.NO then
            free = free + 1
        else
            other = other or code
        end
    end
    if other then return other end
    if held == #keys then return codes.OK end
    if free == #keys then return codes.NO end
    return codes.UNAVAILABLE
end

local COMMANDS = {
    run = cmd_run,
    try = cmd_run,
    acquire = cmd_acquire,
    status = cmd_status,
    release = function(ctx) return by_token(ctx, "release") end,
    extend = function(ctx) return by_token(ctx, "extend") end,
}

local function usage_error(err, msg)
    err:write("redlock: ", msg, "\n", _M.USAGE, "Try 'redlock --help' for more.\n")
    return codes.USAGE
end

--- Runs the command line `args` (a list of strings, as `arg`). getenv
-- reads the environment (default os.getenv); out and err are the output
-- streams (default io.stdout, io.stderr). Returns the exit code; never
-- raises, never exits.
function _M.main(args, getenv, out, err)
    getenv, out, err = getenv or os.getenv, out or io.stdout, err or io.stderr
    local ctx = { out = out, err = err }
    local ok, code = pcall(function()
        local cfg = args_mod.parse(args, getenv)
        if cfg.help then
            out:write(_M.HELP)
            return codes.OK
        end
        if cfg.version then
            out:write("redlock ", redlock.VERSION, "\n")
            return codes.OK
        end
        ctx.cfg = cfg
        ctx.say = function(msg)
            if not cfg.quiet then err:write("redlock: ", msg, "\n") end
        end
        ctx.client = make_client(cfg, err)
        return COMMANDS[cfg.command](ctx)
    end)
    if ctx.client then ctx.client:close() end
    if ok then return code end
    if type(code) == "table" and code.usage then return usage_error(err, code.usage) end
    err:write("redlock: internal error: ", tostring(code), "\n")
    return codes.SOFTWARE
end

return _M
