--- A waiter paused after a release handed it the lock, past that lock's
-- ttl, while another holder takes the key (issue 49). Host-neutral: plain
-- Lua (spec/43) and nginx (spec/openresty/pause.lua) run the same steps.
--
-- H holds the key; W waits for it. W's first block is replaced by the
-- pause: H releases (the release hands W the lock), and W is not resumed
-- until that hand-off has run out and X holds the key; then W goes on as
-- a waiter that resumed late would: its next attempt is refused, and its
-- next wait may find the old hand-off (inside nginx its worker's
-- subscriber kept the message). Whatever W's acquire returns must not
-- count as held while X's lock is valid.
local redlock = require "redlock"

local _M = {}

-- The options of each kind: W's and H's, then X's (a writer where W reads).
local KINDS = {
    lock = { {}, {} },
    permit = { { limit = 1 }, { limit = 1 } },
    reader = { { shared = true }, {} },
}

--- Runs the case; server: a URL or a server table; kind: "lock",
-- "permit" or "reader"; now(): ms. Returns a table: paused (W was paused
-- as described), handed (the key held W's token after H's release; single
-- locks only, else nil), w_remaining / x_remaining (ms, when W's acquire
-- returned), err (W's, when it got nothing).
function _M.run(server, key, kind, now)
    local w_opts, x_opts = KINDS[kind][1], KINDS[kind][2]
    -- (fair: H's release hands W the lock however short W's wait)
    local base = { servers = { server }, ttl = 300, wait = 5000, retry_delay = 10, retry_jitter = 0, fair = true }
    local h_client, w_client, x_client = redlock.new(base), redlock.new(base), redlock.new(base)
    local out = { paused = false }
    local h = assert(h_client:acquire(key, x_opts))
    local x
    local w_server = w_client.servers[1]
    local real_wait = w_server.wait
    w_server.wait = function(self, k, ms, since, token, ...)
        if out.paused or not token then return real_wait(self, k, ms, since, token, ...) end
        out.paused = true
        assert(h:release())
        if kind == "lock" then out.handed = h_client.servers[1]:call("GET", key) == token end
        -- paused until the handed lock has run out and X holds the key (X
        -- is refused until then; a newcomer, it is not held back by a queue
        -- that the hand-off emptied)
        local deadline = now() + 3000
        repeat
            x = x_client:try_acquire(key, { ttl = 2500, limit = x_opts.limit })
            if not x then w_client.transport.sleep(10) end
        until x or now() > deadline
        return true
    end
    local w, err = w_client:acquire(key, w_opts)
    if w then
        out.w_remaining, out.x_remaining = w:remaining(), x and x:remaining() or -1
        w:release()
    else
        out.err = err
    end
    if x then x:release() end
    for _, c in ipairs { h_client, w_client, x_client } do c:close() end
    return out
end

return _M
