/* The Redis-side scripts. Each runs atomically on the server, which is what
 * makes "check the token, then act" safe: no other client can act between
 * the check and the act. Keys and values arrive as KEYS/ARGV, never spliced
 * into the text, so a key can hold any bytes. */
#ifndef REDLOCK_SCRIPTS_H
#define REDLOCK_SCRIPTS_H

#include <stddef.h>

/* The fence (Lua text shared by the scripts that grant a lock): one
 * counter per server (per hash slot on a Cluster), for every lock key. On a
 * server with streams (Redis 5.0+) the counter is a stream kept empty
 * (MAXLEN 0 keeps its last ID): XADD * answers an ID "ms-seq" the server
 * makes greater than the stream's last one from its own clock (ms = the
 * later of its clock and the last ID's ms, seq counting within that ms),
 * and the fence is (ms - 2026-01-01 UTC) * 100 + seq: every grant raises
 * the counter to the clock in one atomic command (the acquire without a
 * script, conn:grant, sends the same XADD). A seq of 100 or more would
 * reach the next ms's fences: then the next ms's first ID is taken,
 * explicitly. A stream lost (restart without persistence, failover to a
 * replica that missed grants, FLUSHALL, eviction) starts again at the
 * clock: above every fence given before as long as the clock of the
 * server that answers is not behind the one that gave them (the same
 * millisecond aside). Without streams (before 5.0: XADD is unknown) the
 * counter is a string: INCR, raised to TIME when below it (TIME needs
 * effects replication before Redis 5: replicate_commands, called first;
 * a server without it, before 3.2, gets the counter alone). A string
 * counter met on a server with streams (a server upgraded from before
 * 5.0) is replaced by the stream, counting on above its value. Fences
 * stay below 10^14 until 2057: "%.14g" (tostring on Lua 5.1 and LuaJIT)
 * writes them whole. `counter` is the counter's key, or false when the
 * caller asked for no fence. A failure raises the server's error before
 * the caller writes anything. */
#define REDLOCK_FENCE_EPOCH_MS 1767225600000LL
#define REDLOCK_FENCE_EPOCH "1767225600000"
#define REDLOCK_SCRIPT_FENCE_FUNCTION                                       \
    "local seeded = redis.replicate_commands and redis.replicate_commands()\n" \
    "local EPOCH = " REDLOCK_FENCE_EPOCH "\n"                               \
    "local function xadd(counter, id)\n"                                    \
    "  return redis.pcall('XADD', counter, 'MAXLEN', '0', id, 'f', '1')\n"  \
    "end\n"                                                                 \
    "local function failed(r, what)\n"                                      \
    "  return type(r) == 'table' and r.err and string.find(r.err, what, 1, true)\n" \
    "end\n"                                                                 \
    "local function parse(id)\n"                                            \
    "  local ms, seq = string.match(id, '^(%d+)-(%d+)$')\n"                 \
    "  return tonumber(ms), tonumber(seq)\n"                                \
    "end\n"                                                                 \
    "local function counted(counter)\n"                                     \
    "  local f = redis.call('INCR', counter)\n"                             \
    "  if seeded then\n"                                                    \
    "    local t = redis.call('TIME')\n"                                    \
    "    local base = (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n" \
    "      - EPOCH) * 100\n"                                                \
    "    if f < base then\n"                                                \
    "      redis.call('SET', counter, string.format('%.0f', base))\n"       \
    "      f = base\n"                                                      \
    "    end\n"                                                             \
    "  end\n"                                                               \
    "  return f\n"                                                          \
    "end\n"                                                                 \
    "local function fence(counter)\n"                                       \
    "  if not counter then return 0 end\n"                                  \
    "  local id, floor = xadd(counter, '*'), -1\n"                          \
    "  if type(id) ~= 'string' then\n"                                      \
    "    if failed(id, 'nknown') then return counted(counter) end\n"       \
    "    if failed(id, 'WRONGTYPE') then\n"                                 \
    "      floor = redis.call('INCR', counter)\n"                           \
    "      redis.call('DEL', counter)\n"                                    \
    "    end\n"                                                             \
    "    id = redis.call('XADD', counter, 'MAXLEN', '0', '*', 'f', '1')\n" \
    "  end\n"                                                               \
    "  local ms, seq = parse(id)\n"                                         \
    "  local f = (ms - EPOCH) * 100 + seq\n"                                \
    "  if seq < 100 and f > floor then return f end\n"                     \
    "  if seq >= 100 then f = (ms + 1 - EPOCH) * 100 end\n"                 \
    "  if f <= floor then f = floor + 1 end\n"                              \
    "  local s = f % 100\n"                                                 \
    "  redis.call('XADD', counter, 'MAXLEN', '0',\n"                        \
    "    string.format('%.0f-%d', (f - s) / 100 + EPOCH, s), 'f', '1')\n"   \
    "  return f\n"                                                          \
    "end\n"

/* KEYS[1] lock key, then for a caller that waits for a release (notified
 * waiting) KEYS[2] the waiters queue, KEYS[3] the waiters' data and
 * KEYS[4] the caller's own hand-off list (all with the lock key's hash
 * tag), then, when the caller wants a fence, the fence counter last (so: 2
 * or 5 keys with a fence, 1 or 4 without); ARGV[1] token, ARGV[2] ttl in
 * ms, ARGV[3] (a waiter) ms its next block lasts at most (its remaining
 * wait, at most redlock.notify's RECHECK_MS), ARGV[4] (a waiter) "h" when
 * it blocks on its hand-off list and may be handed the lock, "w" when it
 * only wants to be woken.
 * Returns {1, fence} when we hold the lock (fence 0 when none was asked
 * for), {0, pttl} when another holder does (pttl -1: the key has no expiry,
 * e.g. written by hand), and to a waiter {0, pttl, server ms} (0 without
 * TIME, before Redis 3.2).
 * The fence is taken before the key is written: a counter that fails
 * (not a number, out of memory, no permission) leaves nothing held.
 * Every grant takes a new fence, our own token found again included: the
 * fence given with a lost reply was never seen. Our own token already
 * there counts as held by us, with the ttl refreshed: that makes a retry
 * after a lost reply, or a Redlock retry that finds its own leftover key,
 * succeed instead of locking itself out; a waiter that finds the lock
 * handed to it before it blocked takes it that way too.
 * A refused waiter joins the waiters queue in the same step, at the back
 * the first time (a later attempt keeps its place; not ZADD NX, which
 * Redis before 3.0.2 lacks), with its data
 * "alive-until ttl fenced": the server ms until which it counts as waiting
 * (its next block is bounded by the holder's pttl and ARGV[3]; a waiter
 * that has not asked again by then, plus SLACK, is skipped and dropped, so
 * one that died costs a hand-off at most once), and for
 * "h" the ttl and fence a hand-off gives it (ttl 0: wake it only). The
 * queue and the data live at least as long as any member counts as
 * waiting: a release (even one that comes before the waiter blocks) knows
 * to hand over or wake, and without waiters does no such work. A refusal
 * also empties the waiter's hand-off list: whatever is there is left from
 * a hand-off that has ended (the key would hold our token otherwise), and
 * must not be taken for a new one. A waiter leaves the queue when it gets
 * the lock (a queue left empty is gone), or when it gives up. */
#define REDLOCK_WAIT_SLACK_MS "1000"
#define REDLOCK_SCRIPT_ACQUIRE                                              \
    REDLOCK_SCRIPT_FENCE_FUNCTION                                           \
    "local n = #KEYS\n"                                                     \
    "local counter = (n == 2 or n == 5) and KEYS[n]\n"                      \
    "local waiting = n >= 4\n"                                              \
    "local cur = redis.call('GET', KEYS[1])\n"                              \
    "if cur and cur ~= ARGV[1] then\n"                                      \
    "  local pttl = redis.call('PTTL', KEYS[1])\n"                          \
    "  if not waiting then return {0, pttl} end\n"                          \
    "  redis.call('DEL', KEYS[4])\n"                                        \
    "  if not seeded then\n"                                                \
    "    if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then\n"             \
    "      redis.call('ZADD', KEYS[2], 0, ARGV[1])\n"                       \
    "    end\n"                                                             \
    "    if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[3]) then\n"         \
    "      redis.call('PEXPIRE', KEYS[2], ARGV[3])\n"                       \
    "    end\n"                                                             \
    "    return {0, pttl, 0}\n"                                             \
    "  end\n"                                                               \
    "  local t = redis.call('TIME')\n"                                      \
    "  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n" \
    "  local span = tonumber(ARGV[3])\n"                                    \
    "  if pttl >= 0 and pttl + 1 < span then span = pttl + 1 end\n"         \
    "  span = span + " REDLOCK_WAIT_SLACK_MS "\n"                           \
    "  if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then\n"               \
    "    redis.call('ZADD', KEYS[2], t[1] .. string.format('%06d', tonumber(t[2])), ARGV[1])\n" \
    "  end\n"                                                               \
    "  redis.call('HSET', KEYS[3], ARGV[1], string.format('%.0f %s %d', now + span,\n" \
    "    ARGV[4] == 'h' and ARGV[2] or '0', counter and 1 or 0))\n"     \
    "  for i = 2, 3 do\n"                                                   \
    "    if redis.call('PTTL', KEYS[i]) < span then redis.call('PEXPIRE', KEYS[i], span) end\n" \
    "  end\n"                                                               \
    "  return {0, pttl, now}\n"                                             \
    "end\n"                                                                 \
    "local f = fence(counter)\n"                                          \
    "if cur then\n"                                                         \
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"                           \
    "else\n"                                                                \
    "  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"                \
    "end\n"                                                                 \
    "if waiting then\n"                                                     \
    "  redis.call('ZREM', KEYS[2], ARGV[1])\n"                              \
    "  redis.call('HDEL', KEYS[3], ARGV[1])\n"                              \
    "  redis.call('DEL', KEYS[4])\n"                                        \
    "end\n"                                                                 \
    "return {1, f}\n"

/* KEYS[1] lock key, then either KEYS[2] the waiters queue, or KEYS[2] the
 * waiters queue, KEYS[3] the waiters' data, KEYS[4] the wake-up list,
 * KEYS[5] the fence counter (all with the same hash tag); ARGV[1] token,
 * ARGV[2] (with five keys) what a waiter's hand-off list is named, less
 * the waiter's token.
 * Compare-and-delete: 1 released, 0 the key is gone or holds another token
 * (we must not delete the next holder's), 3 released and the lock handed
 * over or waiters woken (five keys only: the caller may send five keys
 * next time).
 * Without a waiters queue nobody waits (every refused waiter joins it, see
 * ACQUIRE, and it outlives their waits): the key is just deleted. With two
 * keys and waiters, nothing is done and the reply is 2: the caller then
 * sends the five-key form. (Two keys keep the uncontended release as small
 * as the plain one: every argument costs both sides.)
 * The direct hand-off: the waiter at the front of the queue (waiters that
 * no longer count as waiting are dropped on the way, and so are waiters
 * without data, from a version before the hand-off, which are woken
 * instead: they add themselves again when they try again) that blocks on its
 * hand-off list gets the lock in this same step: the key holds its token
 * for its ttl, with a new fence when it asked for one, and its hand-off
 * list one element "fence server-ms", which its BLPOP returns: it holds
 * the lock with no further request, and its validity counts from this
 * server ms (see redlock.notify). The list lives as long as the lock.
 * (Its name is not among KEYS, which the caller cannot know: while a
 * Cluster slot migrates, a node refuses such a key that it does not hold
 * yet; then that waiter is woken instead, below, as its BLPOP also watches
 * the wake-up list. Before the hand-off the list is empty: the waiter's
 * refusal emptied it, and it is in the queue for one hand-off only.)
 * A front waiter that only wants to be woken, or a server without TIME,
 * gets the key deleted and the wake-up list left with exactly one element,
 * which lives 1 s (one already there is kept, not deleted and pushed
 * again: while a Cluster slot migrates, a node refuses to create a key in
 * a script, even one the script has just deleted; the keys named in KEYS
 * exist there, or the node answers TRYAGAIN before the script runs):
 * Redis hands it to the longest-blocked BLPOP waiter on
 * it, or to the next one to BLPOP within that second (a release between a
 * waiter's failed attempt and its BLPOP is not lost); the key is also
 * published on the channel "redlock:wake", for the waiters inside nginx,
 * which cannot block on a connection each: one subscriber per worker wakes
 * them (redlock.ngx_wait).
 * Callers passing one key get neither (plain compare-and-delete). */
#define REDLOCK_SCRIPT_RELEASE                                              \
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"          \
    "if not KEYS[2] or redis.call('EXISTS', KEYS[2]) == 0 then\n"           \
    "  redis.call('DEL', KEYS[1])\n"                                        \
    "  return 1\n"                                                          \
    "end\n"                                                                 \
    "if not KEYS[3] then return 2 end\n"                                    \
    REDLOCK_SCRIPT_FENCE_FUNCTION                                           \
    "local wake = not seeded\n"                                             \
    "if seeded then\n"                                                      \
    "  local t = redis.call('TIME')\n"                                      \
    "  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n" \
    "  while true do\n"                                                     \
    "    local front = redis.call('ZRANGE', KEYS[2], 0, 0)[1]\n"            \
    "    if not front then break end\n"                                     \
    "    local d = redis.call('HGET', KEYS[3], front)\n"                    \
    "    local alive, ttl, fenced\n"                                        \
    "    if d then alive, ttl, fenced = string.match(d, '^(%d+) (%d+) (%d)$') end\n" \
    "    if not alive then wake = true end\n"                               \
    "    if alive and tonumber(alive) >= now then\n"                        \
    "      if ttl == '0' then wake = true break end\n"                      \
    "      local f = fence(fenced == '1' and KEYS[5])\n"                    \
    "      local list = ARGV[2] .. front\n"                                 \
    "      local pushed = redis.pcall('RPUSH', list, string.format('%.0f %.0f', f, now))\n" \
    "      if type(pushed) ~= 'number' then wake = true break end\n"        \
    "      redis.call('PEXPIRE', list, ttl)\n"                              \
    "      redis.call('SET', KEYS[1], front, 'PX', ttl)\n"                  \
    "      redis.call('ZREM', KEYS[2], front)\n"                            \
    "      redis.call('HDEL', KEYS[3], front)\n"                            \
    "      return 3\n"                                                      \
    "    end\n"                                                             \
    "    redis.call('ZREM', KEYS[2], front)\n"                              \
    "    redis.call('HDEL', KEYS[3], front)\n"                              \
    "  end\n"                                                               \
    "end\n"                                                                 \
    "redis.call('DEL', KEYS[1])\n"                                          \
    "if not wake then return 1 end\n"                                       \
    "if redis.call('EXISTS', KEYS[4]) == 0 then redis.call('RPUSH', KEYS[4], '1') end\n" \
    "redis.call('PEXPIRE', KEYS[4], 1000)\n"                                \
    "redis.call('PUBLISH', 'redlock:wake', KEYS[1])\n"                      \
    "return 3\n"

/* KEYS[1] lock key, KEYS[2] the waiters queue, KEYS[3] the waiters' data,
 * KEYS[4] the caller's hand-off list; ARGV[1] token. A waiter that gives
 * up leaves the queue; if the lock was handed to it meanwhile, the answer
 * is its hand-off's element ("fence server-ms", as BLPOP would have
 * returned it), or "held" when the key holds its token without one (the
 * element was popped, and the reply lost): the caller then takes the lock,
 * or releases it. Else false. */
#define REDLOCK_SCRIPT_GIVE_UP                                              \
    "redis.call('ZREM', KEYS[2], ARGV[1])\n"                                \
    "redis.call('HDEL', KEYS[3], ARGV[1])\n"                                \
    "local handed = redis.call('LPOP', KEYS[4])\n"                          \
    "redis.call('DEL', KEYS[4])\n"                                          \
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end\n"      \
    "return handed or 'held'\n"

/* KEYS[1] lock key; ARGV[1] token, ARGV[2] new ttl in ms.
 * Compare-and-PEXPIRE: a bare EXPIRE could extend somebody else's lock. */
#define REDLOCK_SCRIPT_EXTEND                                               \
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"                       \
    "  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"                    \
    "end\n"                                                                 \
    "return 0\n"

/* KEYS[1] lock key, KEYS[2] fence counter. Returns {value or false, pttl,
 * counter}: what `redlock status` shows (the counter: the last fence the
 * server gave, for any key: the fence of the stream's last ID, or the
 * string counter of a server without streams), read in one atomic step. */
#define REDLOCK_SCRIPT_STATUS                                               \
    REDLOCK_SCRIPT_FENCE_FUNCTION                                           \
    "local last = 0\n"                                                      \
    "local kind = redis.call('TYPE', KEYS[2])\n"                            \
    "kind = type(kind) == 'table' and kind.ok or kind\n"                    \
    "if kind == 'stream' then\n"                                            \
    "  local info = redis.call('XINFO', 'STREAM', KEYS[2])\n"              \
    "  for i = 1, #info - 1, 2 do\n"                                        \
    "    if info[i] == 'last-generated-id' then\n"                          \
    "      local ms, seq = parse(info[i + 1])\n"                            \
    "      last = (ms - EPOCH) * 100 + math.min(seq, 99)\n"                 \
    "    end\n"                                                             \
    "  end\n"                                                               \
    "elseif kind == 'string' then\n"                                        \
    "  last = tonumber(redis.call('GET', KEYS[2])) or 0\n"                  \
    "end\n"                                                                 \
    "return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), last}\n"

/* KEYS[1] fence counter; ARGV[1] a fence. Raises the counter to at least
 * the fence, never lowers it: the stream's last ID to the fence's (an
 * explicit XADD, refused when the last ID is already higher), or a string
 * counter's value. Returns 1. Redlock writes a lock's fence back to the
 * servers that granted it, so that the next majority, which shares a
 * server with this one, counts past it. */
#define REDLOCK_SCRIPT_FENCE_RAISE                                          \
    REDLOCK_SCRIPT_FENCE_FUNCTION                                           \
    "local f = tonumber(ARGV[1])\n"                                        \
    "local s = f % 100\n"                                                   \
    "local r = xadd(KEYS[1], string.format('%.0f-%d', (f - s) / 100 + EPOCH, s))\n" \
    "if type(r) == 'string' or failed(r, 'smaller') then return 1 end\n"   \
    "if not (failed(r, 'nknown') or failed(r, 'WRONGTYPE')) then\n"        \
    "  return redis.call('XADD', KEYS[1], 'MAXLEN', '0', '*', 'f', '1') and 1\n" \
    "end\n"                                                                 \
    "local c = tonumber(redis.call('GET', KEYS[1]) or '0')\n"              \
    "if c < f then redis.call('SET', KEYS[1], ARGV[1]) end\n"              \
    "return 1\n"

typedef struct {
    const char *name;
    const char *source;
    char sha[41];
} redlock_script;

/* The table of scripts, with their SHA-1 names filled in once. */
redlock_script *redlock_scripts(void);
const redlock_script *redlock_script_find(const char *name);
/* The fence of a counter stream's ID, -1 when it gives none (script.c). */
long long redlock_fence_of_id(const char *s, size_t len);

#endif
