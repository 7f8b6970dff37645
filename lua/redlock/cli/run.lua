--- `redlock run` / `redlock try` with a command: runs CMD while holding the
-- lock. Plain Lua cannot wait for a child and renew a lock at once, so this
-- loop does both in turns: it polls the child (core.proc.wait, at most 20 ms
-- late) until the next renewal is due, renews with lock:extend every ttl/3,
-- and goes back to polling. Signals are forwarded to CMD by core.proc's
-- handler even while a renewal waits for Redis. Internal.
local core = require "redlock.core"
local codes = require "redlock.cli.codes"

local proc, now = core.proc, core.now
local format, floor, max, min, type, ipairs = string.format, math.floor, math.max, math.min, type, ipairs

local _M = {}

--- After SIGTERM on a lost lock (--kill-on-lost), SIGKILL this much later.
_M.KILL_GRACE = 5000

-- Waits for CMD while renewing the lock. Returns how ("exit" or "signal"),
-- value, and the message of the loss if the lock was lost; or nil, message
-- when the child cannot be waited for.
local function supervise(lock, pid, cfg, say)
    local interval = max(floor(lock.ttl / 3), 1)
    local retry = max(floor(interval / 4), 20)
    local next_renew = now() + interval
    local lost, kill_at, warned
    while true do
        local t = now()
        local due = lost and (kill_at or t + 1000) or next_renew
        local how, value = proc.wait(pid, min(max(due - t, 0), 1000))
        if how then return how, value, lost end
        if how == nil then return nil, value, lost end
        t = now()
        if lost then
            if kill_at and t >= kill_at then
                proc.kill(pid, "KILL")
                kill_at = nil
            end
        elseif t >= next_renew then
            local ok, err, code = lock:extend()
            if ok then
                next_renew = now() + interval
                if warned then say("renewed the lock again") end
                warned = false
            elseif code == "not owner" or lock:remaining() <= 0 then
                lost = code == "not owner" and err
                    or format("could not renew it within its ttl (%s)", err)
                if cfg.kill_on_lost then
                    say(format("lost the lock: %s; stopping CMD (SIGTERM)", lost))
                    proc.kill(pid, "TERM")
                    kill_at = now() + _M.KILL_GRACE
                else
                    say(format("lost the lock: %s; CMD keeps running without it", lost))
                end
            else
                -- Redis may be back before the validity runs out: try again soon
                if not warned then
                    say(format("could not renew the lock, retrying: %s", err))
                    warned = true
                end
                next_renew = now() + min(retry, max(lock:remaining() / 2, 1))
            end
        end
    end
end

local SPAWN_FAILED = {
    ["not found"] = codes.NOT_FOUND,
    ["cannot execute"] = codes.CANNOT_EXECUTE,
    system = codes.OSERR,
}

--- Runs cfg.cmd while holding `lock`, then releases it. Returns the exit
-- code: CMD's status (128+N if a signal N killed it), codes.LOST if the
-- lock was lost on the way, 126/127/71 if CMD could not be started.
-- say(msg) reports on stderr unless --quiet.
function _M.run(cfg, lock, say)
    proc.trap()
    local env = {
        REDLOCK_KEY = lock.key,
        REDLOCK_TOKEN = lock.token,
        REDLOCK_TTL = format("%d", lock.ttl),
    }
    if type(lock.fence) == "number" then env.REDLOCK_FENCE = format("%d", lock.fence) end
    local keys = lock.keys
    if keys then -- a group lock: its keys and fences, one per line
        env.REDLOCK_KEY = keys[1]
        env.REDLOCK_KEYS = table.concat(keys, "\n")
        if lock.fences then
            local f = {}
            for i, k in ipairs(keys) do f[i] = format("%d", lock.fences[k]) end
            env.REDLOCK_FENCES = table.concat(f, "\n")
        end
    end
    local sig = proc.caught()
    local pid, err, why
    if not sig then
        pid, err, why = proc.spawn(cfg.cmd, { env = env, die_with_parent = cfg.kill_on_lost })
    end
    if not pid then
        lock:release()
        if sig then return codes.SIGNALED + sig end -- a signal came before CMD started
        say(err)
        return SPAWN_FAILED[why] or codes.OSERR
    end

    local how, value, lost = supervise(lock, pid, cfg, say)
    if how == nil then
        say(value)
        lock:release()
        return codes.OSERR
    end
    if lost then return codes.LOST end
    local ok, rerr, rcode = lock:release()
    if not ok then
        if rcode == "not owner" then
            say(format("lost the lock before CMD ended: %s", rerr))
            return codes.LOST
        end
        say(format("could not release the lock (it expires within %d ms): %s", lock.ttl, rerr))
    end
    return how == "exit" and value or codes.SIGNALED + value
end

return _M
