/* The Redis-side scripts. Each runs atomically on the server, which is what
 * makes "check the token, then act" safe: no other client can act between
 * the check and the act. Keys and values arrive as KEYS/ARGV, never spliced
 * into the text, so a key can hold any bytes. */
#ifndef REDLOCK_SCRIPTS_H
#define REDLOCK_SCRIPTS_H

/* KEYS[1] lock key, then for a caller that will wait for a release
 * (notified waiting) KEYS[2] the "next" mark and KEYS[3] the waiters set
 * (with the lock key's hash tag), then, when the caller wants a fence, the
 * fence counter last (so: 2 or 4 keys with a fence, 1 or 3 without);
 * ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] (a waiter) ms it may still
 * wait, ARGV[4] (a waiter's later attempts) "1", or "2" when it has waited
 * long and asks to be next.
 * Returns {1, fence} when we hold the lock (fence 0 when none was asked
 * for), {0, pttl} when another holder does (pttl -1: the key has no expiry,
 * e.g. written by hand).
 * The fence: one counter per server (per hash slot on a Cluster), for every
 * lock key: INCR, raised to the server's clock when below it (a SET at most
 * once a millisecond); the clock in ms since 2026-01-01 UTC, times 100:
 * strictly increasing across all grants on the server, and, the counter
 * being lost (restart without persistence, failover to a replica that
 * missed it), still above every fence given before as long as the server's
 * clock does not go back (and fewer than 100 locks a millisecond were
 * granted on average, more than one Redis serves). Fences stay below 10^14
 * until 2057: "%.14g" (tostring on Lua 5.1 and LuaJIT) writes them whole. (TIME needs effects replication before Redis 5:
 * replicate_commands, called first; a server without it, before 3.2, gets
 * the counter alone.) Every grant takes a new fence, our own token found
 * again included: the fence given with a lost reply was never seen.
 * Our own token already there counts as held by us, with the ttl refreshed:
 * that makes a retry after a lost reply, or a Redlock retry that finds its
 * own leftover key, succeed instead of locking itself out; it is also how a
 * waiter claims a lock that a release handed over to it (see RELEASE).
 * A refused waiter joins the waiters set in the same step, and the set lives
 * at least as long as any member may wait: a release (even one that comes
 * before the waiter blocks) knows to wake somebody, and without waiters
 * does no wake-up work at all. A waiter leaves the set when it gets the
 * lock (a set left empty is gone), or when it gives up. With ARGV[4] "2",
 * if nobody else is marked, the mark holds its token for ARGV[3] ms, and
 * the reply is {0, pttl, 1} while the mark is its own. A claim of a
 * hand-off, or a marked waiter's acquire of a free key, clears its mark. */
#define REDLOCK_SCRIPT_ACQUIRE                                              \
    "local seeded = redis.replicate_commands and redis.replicate_commands()\n" \
    "local counter = #KEYS % 2 == 0 and KEYS[#KEYS]\n"                      \
    "local function fence()\n"                                              \
    "  if not counter then return 0 end\n"                                  \
    "  local f = redis.call('INCR', counter)\n"                             \
    "  if seeded then\n"                                                    \
    "    local t = redis.call('TIME')\n"                                    \
    "    local base = (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n" \
    "      - 1767225600000) * 100\n"                                         \
    "    if f < base then\n"                                                \
    "      redis.call('SET', counter, string.format('%.0f', base))\n"       \
    "      f = base\n"                                                      \
    "    end\n"                                                             \
    "  end\n"                                                               \
    "  return f\n"                                                          \
    "end\n"                                                                 \
    "local cur = redis.call('GET', KEYS[1])\n"                              \
    "if cur == ARGV[1] then\n"                                              \
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"                           \
    "  if ARGV[4] then\n"                                                   \
    "    redis.call('ZREM', KEYS[3], ARGV[1])\n"                            \
    "    if redis.call('GET', KEYS[2]) == '=' .. ARGV[1] then\n"            \
    "      redis.call('DEL', KEYS[2])\n"                                    \
    "    end\n"                                                             \
    "  end\n"                                                               \
    "  return {1, fence()}\n"                                               \
    "end\n"                                                                 \
    "if cur then\n"                                                         \
    "  local pttl = redis.call('PTTL', KEYS[1])\n"                          \
    "  if ARGV[3] then\n"                                                   \
    "    redis.call('ZADD', KEYS[3], 0, ARGV[1])\n"                         \
    "    if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[3]) then\n"         \
    "      redis.call('PEXPIRE', KEYS[3], ARGV[3])\n"                       \
    "    end\n"                                                             \
    "    if ARGV[4] == '2' then\n"                                          \
    "      local nxt = redis.call('GET', KEYS[2])\n"                        \
    "      if not nxt or nxt == ARGV[1] then\n"                             \
    "        redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])\n"          \
    "        return {0, pttl, 1}\n"                                         \
    "      end\n"                                                           \
    "    end\n"                                                             \
    "  end\n"                                                               \
    "  return {0, pttl}\n"                                                  \
    "end\n"                                                                 \
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"                  \
    "if ARGV[4] then\n"                                                     \
    "  redis.call('ZREM', KEYS[3], ARGV[1])\n"                              \
    "  if redis.call('GET', KEYS[2]) == ARGV[1] then\n"                     \
    "    redis.call('DEL', KEYS[2])\n"                                      \
    "  end\n"                                                               \
    "end\n"                                                                 \
    "return {1, fence()}\n"

/* KEYS[1] lock key, then either KEYS[2] the waiters set, or KEYS[2] the
 * wake-up list, KEYS[3] the "next" mark, KEYS[4] the hand-off list, KEYS[5]
 * the waiters set (all with the same hash tag); ARGV[1] token, ARGV[2]
 * (with five keys) ms a hand-off reserves the key.
 * Compare-and-delete: 1 released, 0 the key is gone or holds another token
 * (we must not delete the next holder's), 3 released (or handed over) and
 * waiters woken (five keys only: the caller may send five keys next time).
 * Without a waiters set nobody waits (every refused waiter joins it, see
 * ACQUIRE, and it outlives their waits): the key is just deleted. With two
 * keys and waiters, nothing is done and the reply is 2: the caller then
 * sends the five-key form, which wakes them. (Two keys keep the uncontended
 * release as small as the plain one: every argument costs both sides.)
 * Otherwise a waiter marked next gets the key handed over: it holds the
 * waiter's token for ARGV[2] ms (its claim takes a new fence), and the hand-off list
 * gets one element (only the marked waiter blocks on it); its claim
 * (ACQUIRE, own token) sets its ttl. Until that claim the mark reads
 * "=token", which no other waiter can take, so nobody else pops that
 * element. A waiter that died meanwhile costs those ms, once.
 * If none is marked the key is deleted. Either way the wake-up list is left
 * with exactly one element, which lives 1 s: Redis hands it to the
 * longest-blocked BLPOP waiter (after a hand-off, that one tries, fails and
 * marks itself next, so every waiter gets its turn), or to the next waiter
 * to BLPOP within that second (a release between a waiter's failed attempt
 * and its BLPOP is not lost). The key is also published on the channel
 * "redlock:wake", for the waiters inside nginx, which cannot block on a
 * connection each: one subscriber per worker wakes them (redlock.ngx_wait).
 * Callers passing one key get neither (plain compare-and-delete). */
#define REDLOCK_SCRIPT_RELEASE                                              \
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"          \
    "local waiters = KEYS[5] or KEYS[2]\n"                                  \
    "if not waiters or redis.call('EXISTS', waiters) == 0 then\n"           \
    "  redis.call('DEL', KEYS[1])\n"                                        \
    "  return 1\n"                                                          \
    "end\n"                                                                 \
    "if not KEYS[3] then return 2 end\n"                                    \
    "local nxt = redis.call('GET', KEYS[3])\n"                              \
    "if nxt and string.sub(nxt, 1, 1) ~= '=' then\n"                        \
    "  redis.call('SET', KEYS[3], '=' .. nxt, 'PX', ARGV[2])\n"             \
    "  redis.call('SET', KEYS[1], nxt, 'PX', ARGV[2])\n"                    \
    "  redis.call('DEL', KEYS[4])\n"                                        \
    "  redis.call('RPUSH', KEYS[4], '1')\n"                                 \
    "  redis.call('PEXPIRE', KEYS[4], ARGV[2])\n"                           \
    "else\n"                                                                \
    "  redis.call('DEL', KEYS[1])\n"                                        \
    "end\n"                                                                 \
    "redis.call('DEL', KEYS[2])\n"                                          \
    "redis.call('RPUSH', KEYS[2], '1')\n"                                   \
    "redis.call('PEXPIRE', KEYS[2], 1000)\n"                                \
    "redis.call('PUBLISH', 'redlock:wake', KEYS[1])\n"                      \
    "return 3\n"

/* KEYS[1] lock key; ARGV[1] token, ARGV[2] new ttl in ms.
 * Compare-and-PEXPIRE: a bare EXPIRE could extend somebody else's lock. */
#define REDLOCK_SCRIPT_EXTEND                                               \
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"                       \
    "  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"                    \
    "end\n"                                                                 \
    "return 0\n"

/* KEYS[1] lock key, KEYS[2] fence counter. Returns {value or false, pttl,
 * counter}: what `redlock status` shows (the counter: the last fence the
 * server gave, for any key), read in one atomic step. */
#define REDLOCK_SCRIPT_STATUS                                               \
    "return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]),\n"    \
    "        tonumber(redis.call('GET', KEYS[2]) or '0')}\n"

/* KEYS[1] fence counter; ARGV[1] a fence. Raises the counter to at least
 * the fence, never lowers it; returns the counter. Redlock writes a lock's
 * fence back to the servers that granted it, so that the next majority,
 * which shares a server with this one, counts past it. */
#define REDLOCK_SCRIPT_FENCE_RAISE                                          \
    "local c = tonumber(redis.call('GET', KEYS[1]) or '0')\n"              \
    "local f = tonumber(ARGV[1])\n"                                        \
    "if c < f then redis.call('SET', KEYS[1], ARGV[1]) return f end\n"     \
    "return c\n"

typedef struct {
    const char *name;
    const char *source;
    char sha[41];
} redlock_script;

/* The table of scripts, with their SHA-1 names filled in once. */
redlock_script *redlock_scripts(void);
const redlock_script *redlock_script_find(const char *name);

#endif
