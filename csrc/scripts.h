/* The Redis-side scripts. Each runs atomically on the server, which is what
 * makes "check the token, then act" safe: no other client can act between
 * the check and the act. Keys and values arrive as KEYS/ARGV, never spliced
 * into the text, so a key can hold any bytes. */
#ifndef REDLOCK_SCRIPTS_H
#define REDLOCK_SCRIPTS_H

/* KEYS[1] lock key, KEYS[2] fence counter (same hash tag as the lock key);
 * ARGV[1] token, ARGV[2] ttl in ms.
 * Returns {1, fence} when we hold the lock, {0, pttl} when another holder
 * does (pttl -1: the key has no expiry, e.g. written by hand).
 * Our own token already there counts as held by us, with the ttl refreshed:
 * that makes a retry after a lost reply, or a Redlock retry that finds its
 * own leftover key, succeed instead of locking itself out. */
#define REDLOCK_SCRIPT_ACQUIRE                                              \
    "local cur = redis.call('GET', KEYS[1])\n"                              \
    "if cur == ARGV[1] then\n"                                              \
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"                           \
    "  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}\n"           \
    "end\n"                                                                 \
    "if cur then return {0, redis.call('PTTL', KEYS[1])} end\n"             \
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"                  \
    "return {1, redis.call('INCR', KEYS[2])}\n"

/* KEYS[1] lock key; ARGV[1] token. Compare-and-delete: 1 deleted, 0 the key
 * is gone or holds another token (we must not delete the next holder's). */
#define REDLOCK_SCRIPT_RELEASE                                              \
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"                       \
    "  return redis.call('DEL', KEYS[1])\n"                                 \
    "end\n"                                                                 \
    "return 0\n"

/* KEYS[1] lock key; ARGV[1] token, ARGV[2] new ttl in ms.
 * Compare-and-PEXPIRE: a bare EXPIRE could extend somebody else's lock. */
#define REDLOCK_SCRIPT_EXTEND                                               \
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"                       \
    "  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"                    \
    "end\n"                                                                 \
    "return 0\n"

/* KEYS[1] lock key, KEYS[2] fence counter. Returns {value or false, pttl,
 * fence}: what `redlock status` shows, read in one atomic step. */
#define REDLOCK_SCRIPT_STATUS                                               \
    "return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]),\n"    \
    "        tonumber(redis.call('GET', KEYS[2]) or '0')}\n"

/* KEYS[1] fence counter; ARGV[1] a fence. Raises the counter to at least
 * the fence, never lowers it; returns the counter. Redlock's sync_fence
 * writes a lock's fence back to the majority that granted it, so that the
 * next majority, which shares a server with this one, counts past it. */
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
