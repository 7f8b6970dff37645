--- Exit codes of the `redlock` command, in the spirit of flock(1) and
-- sysexits.h, and how the library's error words map onto them. Internal.
local find, pairs = string.find, pairs

local _M = {
    OK = 0,
    CONFLICT = 1,        -- not acquired: held elsewhere, or waited --wait (-E changes it)
    NO = 1,              -- status: free; release/extend: that token does not hold the key
    USAGE = 64,          -- EX_USAGE
    UNAVAILABLE = 69,    -- EX_UNAVAILABLE: Redis unreachable, no quorum, too few replicas
    SOFTWARE = 70,       -- EX_SOFTWARE: a bug in redlock
    OSERR = 71,          -- EX_OSERR: could not fork, pipe or wait
    LOST = 75,           -- EX_TEMPFAIL: the lock was lost while CMD ran
    PROTOCOL = 76,       -- EX_PROTOCOL: Redis answered with an error
    NOPERM = 77,         -- EX_NOPERM: Redis refused the credentials or the command
    CANNOT_EXECUTE = 126, -- as in sh: CMD found but not executable
    NOT_FOUND = 127,     -- as in sh: CMD not found
    SIGNALED = 128,      -- + N: CMD was killed by signal N
}

--- Whether n (0-255) is free for --conflict-exit-code: not a status
-- redlock gives for something else (0 success, 64-77 its own failures, 126
-- and up: CMD not executable, not found, killed by a signal). Free: 1 (the
-- default), 2-63, 65-68, 72-74, 78-125.
function _M.free(n)
    if n == 0 or n >= _M.CANNOT_EXECUTE then return false end
    for _, used in pairs(_M) do
        if used == n and n ~= _M.CONFLICT then return false end
    end
    return true
end

local function refused(msg)
    return find(msg, "AUTH failed", 1, true) or find(msg, "NOAUTH", 1, true)
        or find(msg, "WRONGPASS", 1, true) or find(msg, "NOPERM", 1, true)
end

--- The exit code for a library failure (message, code word). `conflict` is
-- the code chosen for "could not acquire" (default 1).
function _M.of(msg, word, conflict)
    if word == "locked" or word == "timeout" then return conflict or _M.CONFLICT end
    if word == "not owner" then return _M.NO end
    if word == "misuse" then return _M.USAGE end
    if word == "connection" or word == "no quorum" or word == "replicas" then return _M.UNAVAILABLE end
    if word == "server" then
        return refused(msg or "") and _M.NOPERM or _M.PROTOCOL
    end
    return _M.SOFTWARE
end

return _M
