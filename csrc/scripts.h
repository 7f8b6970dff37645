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
 * writes them whole. Every fence is 1 or more (0 means "no fence" to the
 * callers): a server clock before 2026 counts on from the epoch's first
 * IDs (its ms part at least the epoch's), still rising. `counter` is the
 * counter's key, or false when the caller asked for no fence. A failure
 * raises the server's error: a script takes it before its first write,
 * or with try_fence (false on a failure, the error caught) where a
 * failure must not stop it half-way (a release that hands the key on). */
/* The fence's command in the acquire without a script (conn:grant, and
 * nginx's grant over cosockets, which sends the same words: redlock.core's
 * grant_fence_command, this list with the counter in the 2nd place): one server's
 * counter only, never a Cluster's per-slot ones. The same XADD * as the
 * scripts' (the same IDs, so the same fences), trimmed approximately:
 * MAXLEN ~ 1 makes the server drop whole stream nodes only, so the node of
 * the last entries is reused instead of made and freed on every grant
 * (about 2k instructions less per grant on Redis 7.0; issue 35). The stream
 * then keeps up to stream-node-max-entries entries (100 by default: about
 * 4.7 KB on Redis 6.2 and later, 1.7 KB before) where MAXLEN 0 keeps none
 * (380 bytes): one key per server whatever the number of locks. Its last ID,
 * the counter, is the same either way. (A server configured with both
 * stream-node-max-entries and stream-node-max-bytes at 0, no limit on a
 * node, would keep every entry: the scripts' MAXLEN 0, which every
 * contended or scripted grant sends, empties it again.) */
#define REDLOCK_GRANT_FENCE_ARGC 8
#define REDLOCK_GRANT_FENCE_ARGV(counter) {"XADD", (counter), "MAXLEN", "~", "1", "*", "f", "1"}
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
    "  local id, floor = xadd(counter, '*'), 0\n"                           \
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
    "end\n"                                                                 \
    "local function try_fence(counter)\n"                                   \
    "  local ok, f = pcall(fence, counter)\n"                               \
    "  return ok and f\n"                                                   \
    "end\n"

/* Counting semaphores (limit = N) keep their permits in the lock key itself,
 * a sorted set: member "limit" with score -N (the limit, negative so that
 * the prune below never removes it), and per permit the holder's token
 * with its expiry (server ms) as score. The key's own PEXPIRE is the
 * latest permit's expiry, so the key exists exactly while some permit is
 * unexpired, and a plain `SET key x NX` (or a single lock) sees it held.
 * Every script that reads permits first drops the expired ones (score <=
 * now): each permit expires on its own, at its own time. */

/* now: the server's clock in ms (TIME), as `t` and `now`. */
#define REDLOCK_SCRIPT_NOW                                                  \
    "local t = redis.call('TIME')\n"                                        \
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"

/* The key's PEXPIRE set to its latest permit's expiry, or the key deleted
 * when no permit is left (only the limit member). */
#define REDLOCK_SCRIPT_SET_TTL(key)                                         \
    "if redis.call('ZCARD', " key ") <= 1 then redis.call('DEL', " key ")\n" \
    "else\n"                                                                \
    "  local top = redis.call('ZRANGE', " key ", -1, -1, 'WITHSCORES')\n"    \
    "  redis.call('PEXPIRE', " key ", math.max(1, tonumber(top[2]) - now))\n" \
    "end\n"

/* The grant of a holder set (a semaphore's permits, a shared lock's
 * readers): a fence, the set made with its marker member (`score`,
 * `member`: what kind of set it is) if new, the holder's expiry as its
 * score, the set's ttl its latest holder's, and the holder out of the
 * queue (KEYS[2] waiters, KEYS[3] their data, KEYS[4] its hand-off
 * list). Defines the script's grant(); needs key, ttl, now, counter and
 * fence(). */
#define REDLOCK_SCRIPT_HOLDERS_GRANT(score, member)                         \
    "local function grant()\n"                                              \
    "  local f = fence(counter)\n"                                          \
    "  if redis.call('EXISTS', key) == 0 then redis.call('ZADD', key, " score ", '" member "') end\n" \
    "  redis.call('ZADD', key, string.format('%.0f', now + ttl), ARGV[1])\n" \
    REDLOCK_SCRIPT_SET_TTL("key")                                           \
    "  redis.call('ZREM', KEYS[2], ARGV[1])\n"                              \
    "  redis.call('HDEL', KEYS[3], ARGV[1])\n"                              \
    "  redis.call('DEL', KEYS[4])\n"                                        \
    "  return {1, f}\n"                                                     \
    "end\n"

/* A key that is not a string is no single lock. Readers (a sorted set
 * with the member "shared", see RW_READ) hold it: `var` becomes "" (held
 * by another) for a writer to wait. Anything else answers {2, limit}
 * (limit 0: not a semaphore either, e.g. another application's hash),
 * which the caller reports as misuse, instead of Redis' WRONGTYPE. `var`
 * holds redis.pcall('GET', key); `extra` is appended to the answer. */
#define REDLOCK_SCRIPT_NOT_A_LOCK(var, key, extra)                          \
    "if type(" var ") == 'table' then\n"                                    \
    "  if redis.pcall('ZSCORE', " key ", 'shared') == '-1' then " var " = ''\n" \
    "  else\n"                                                              \
    "    local l = redis.pcall('ZSCORE', " key ", 'limit')\n"               \
    "    return {2, type(l) == 'string' and -tonumber(l) or 0" extra "}\n"  \
    "  end\n"                                                               \
    "end\n"

/* A refused waiter joins the waiters queue (KEYS[2]) with its data
 * (KEYS[3]) and empties its hand-off list (KEYS[4]), as ACQUIRE below
 * describes (every kind's waiter joins here: one queue per key); `now`,
 * `t` (TIME), `pttl` (the holder's), `counter` set; ARGV[1] token,
 * ARGV[2] ttl, `span` the waiter's ARGV of the next block, `how` its
 * "h", "p" or "w", `mark` a Lua expression, what its data ends with (""
 * a single lock's or a writer's, " r": a reader, see RW_READ; " s<limit>":
 * a semaphore's). Answers {0, pttl, now}. */
#define REDLOCK_SCRIPT_JOIN_QUEUE(span_arg, how_arg, mark)                  \
    "redis.call('DEL', KEYS[4])\n"                                          \
    "local span = tonumber(" span_arg ")\n"                                 \
    "if pttl >= 0 and pttl + 1 < span then span = pttl + 1 end\n"           \
    "span = span + " REDLOCK_WAIT_SLACK_MS "\n"                             \
    "if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then\n"                  \
    "  redis.call('ZADD', KEYS[2], t[1] .. string.format('%06d', tonumber(t[2])), ARGV[1])\n" \
    "end\n"                                                                 \
    "redis.call('HSET', KEYS[3], ARGV[1], string.format('%.0f %s %d', now + span,\n" \
    "  " how_arg " ~= 'w' and ARGV[2] or '0',\n"                          \
    "  (counter and 1 or 0) + (" how_arg " == 'p' and 2 or 0)) .. " mark ")\n" \
    "for i = 2, 3 do\n"                                                     \
    "  if redis.call('PTTL', KEYS[i]) < span then redis.call('PEXPIRE', KEYS[i], span) end\n" \
    "end\n"                                                                 \
    "return {0, pttl, now}\n"

/* KEYS[1] lock key, then for a caller that waits for a release (notified
 * waiting) KEYS[2] the waiters queue, KEYS[3] the waiters' data and
 * KEYS[4] the caller's own hand-off list (all with the lock key's hash
 * tag), then, when the caller wants a fence, the fence counter last (so: 2
 * or 5 keys with a fence, 1 or 4 without); ARGV[1] token, ARGV[2] ttl in
 * ms, ARGV[3] (a waiter) ms its next block lasts at most (its remaining
 * wait, at most redlock.notify's RECHECK_MS), ARGV[4] (a waiter) "h" when
 * it blocks on its hand-off list and may be handed the lock, "p" when it
 * may be handed the lock and learns of it from a message (inside nginx,
 * see RELEASE), "w" when it only wants to be woken.
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
 * "h" and "p" the ttl and fence a hand-off gives it (ttl 0: wake it only;
 * fenced 0 or 1, plus 2 for "p": an older release, which knows 0 and 1
 * only, hands such a waiter the lock unfenced by its list, and the
 * waiter's next attempt takes it with a fence). The
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
    "local cur = redis.pcall('GET', KEYS[1])\n"                             \
    REDLOCK_SCRIPT_NOT_A_LOCK("cur", "KEYS[1]", "")                         \
    "if cur and cur ~= ARGV[1] then\n"                                      \
    "  local pttl = redis.call('PTTL', KEYS[1])\n"                          \
    "  if not waiting then return {0, pttl} end\n"                          \
    "  if not seeded then\n"                                                \
    "    redis.call('DEL', KEYS[4])\n"                                      \
    "    if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then\n"             \
    "      redis.call('ZADD', KEYS[2], 0, ARGV[1])\n"                       \
    "    end\n"                                                             \
    "    if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[3]) then\n"         \
    "      redis.call('PEXPIRE', KEYS[2], ARGV[3])\n"                       \
    "    end\n"                                                             \
    "    return {0, pttl, 0}\n"                                             \
    "  end\n"                                                               \
    REDLOCK_SCRIPT_NOW                                                      \
    REDLOCK_SCRIPT_JOIN_QUEUE("ARGV[3]", "ARGV[4]", "''")                   \
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

/* The hand-off of a freed key or permit to the waiter `front` (its token)
 * in the release's atomic step (SERVE_QUEUE, SEM_RELEASE), by how it
 * joined (its data's `fenced`, see ACQUIRE): hand_fence(fenced) takes its
 * fence when it asked for one (try_fence on KEYS[5], the counter: false
 * when the counter fails, 0 without one); hand(front, f, ttl, now,
 * fenced) tells it "fence server-ms": pushed to its hand-off list (ARGV[2]
 * .. front), which lives ttl ms, for a waiter that blocks on it ("h"), or
 * published as "<token> fence server-ms" on "redlock:wake" for one inside
 * nginx ("p": its worker's subscriber hands it to that waiter,
 * redlock.ngx_wait); false when the server refused (the caller then
 * wakes the waiters instead). */
#define REDLOCK_SCRIPT_HAND                                                 \
    "local function hand_fence(fenced)\n"                                   \
    "  return try_fence((fenced == '1' or fenced == '3') and KEYS[5])\n"    \
    "end\n"                                                                 \
    "local function hand(front, f, ttl, now, fenced)\n"                     \
    "  local element = string.format('%.0f %.0f', f, now)\n"               \
    "  if fenced == '2' or fenced == '3' then\n"                            \
    "    local sent = redis.pcall('PUBLISH', 'redlock:wake', front .. ' ' .. element)\n" \
    "    return type(sent) == 'number'\n"                                   \
    "  end\n"                                                               \
    "  local list = ARGV[2] .. front\n"                                     \
    "  local pushed = redis.pcall('RPUSH', list, element)\n"               \
    "  if type(pushed) ~= 'number' then return false end\n"                 \
    "  redis.call('PEXPIRE', list, ttl)\n"                                  \
    "  return true\n"                                                       \
    "end\n"

/* The key KEYS[1] given up by its holder (a single lock, a writer, the
 * last reader) goes to the front of the waiters queue (KEYS[2], data
 * KEYS[3], wake-up list KEYS[4], fence counter KEYS[5]; ARGV[2] the
 * hand-off lists' prefix), in the same step; `seeded` and `fence` from
 * REDLOCK_SCRIPT_FENCE_FUNCTION. Waiters that no longer count as waiting
 * are dropped on the way. A writer (or single-lock) waiter that may be
 * handed the key ("h" or "p") gets it: SET key <its token> PX <its ttl>, a
 * new fence when it asked for one, "fence server-ms" told it
 * (REDLOCK_SCRIPT_HAND: pushed to its list, or published). Live
 * readers at the front (data ending " r", see RW_READ) are let in
 * together: the key becomes a readers set (member "shared", and each
 * reader's token with its expiry), each reader handed "fence server-ms",
 * up to the first waiter that is not such a reader (a writer waits for
 * them); a node that refuses to create the set (a Cluster slot migrating)
 * wakes them instead. A waiter that is only woken, or a server without TIME: the key
 * is deleted and the wake-up list holds one element for 1 s (see RELEASE),
 * and the key is published on "redlock:wake". A hand-off whose fence
 * fails (a counter of another type, no permission for XADD) wakes the
 * waiters instead (their own acquire then fails at its fence, before it
 * writes): each fence is taken before the key is written for that
 * waiter, and the key, handed to nobody, is deleted, or keeps the readers
 * already let in with their ttl, never left without one. The writer's key
 * is set before its list is pushed: a waiter never reads a hand-off of a
 * key that does not hold its token. Answers 1 (deleted, nobody served), 3
 * (handed over or woken). */
#define REDLOCK_SCRIPT_SERVE_QUEUE                                          \
    "local wake = not seeded\n"                                             \
    "local function waiter()\n"                                             \
    "  local front = redis.call('ZRANGE', KEYS[2], 0, 0)[1]\n"              \
    "  if not front then return nil end\n"                                  \
    "  local d = redis.call('HGET', KEYS[3], front)\n"                      \
    "  local alive, ttl, fenced, rd\n"                                      \
    "  if d then alive, ttl, fenced, rd = string.match(d, '^(%d+) (%d+) (%d)( ?r?)$') end\n" \
    "  return front, alive, ttl, fenced, rd == ' r'\n"                      \
    "end\n"                                                                 \
    "local function leave(front)\n"                                         \
    "  redis.call('ZREM', KEYS[2], front)\n"                                \
    "  redis.call('HDEL', KEYS[3], front)\n"                                \
    "end\n"                                                                 \
    REDLOCK_SCRIPT_HAND                                                     \
    "if seeded then\n"                                                      \
    REDLOCK_SCRIPT_NOW                                                      \
    "  local admitted = 0\n"                                                \
    "  while true do\n"                                                     \
    "    local front, alive, ttl, fenced, reader = waiter()\n"              \
    "    if not front then break end\n"                                     \
    "    if not alive then wake = true end\n"                               \
    "    if alive and tonumber(alive) >= now then\n"                        \
    "      if ttl == '0' or (admitted > 0 and not reader) then\n"           \
    "        wake = wake or (ttl == '0' and (reader or admitted == 0))\n"   \
    "        break\n"                                                       \
    "      end\n"                                                           \
    "      local f = hand_fence(fenced)\n"                                  \
    "      if not f then wake = true break end\n"                           \
    "      if reader then\n"                                                \
    "        if admitted == 0 then\n"                                       \
    "          redis.call('DEL', KEYS[1])\n"                                \
    "          if type(redis.pcall('ZADD', KEYS[1], -1, 'shared')) ~= 'number' then wake = true break end\n" \
    "        end\n"                                                         \
    "        if not hand(front, f, ttl, now, fenced) then wake = true break end\n" \
    "        redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ttl)), front)\n" \
    "        admitted = admitted + 1\n"                                     \
    "      else\n"                                                          \
    "        redis.call('SET', KEYS[1], front, 'PX', ttl)\n"                \
    "        if not hand(front, f, ttl, now, fenced) then wake = true break end\n" \
    "        leave(front)\n"                                                \
    "        return 3\n"                                                    \
    "      end\n"                                                           \
    "    end\n"                                                             \
    "    leave(front)\n"                                                    \
    "  end\n"                                                               \
    "  if admitted > 0 then\n"                                              \
    REDLOCK_SCRIPT_SET_TTL("KEYS[1]")                                       \
    "  end\n"                                                               \
    "  if admitted > 0 and not wake then return 3 end\n"                    \
    "  if admitted == 0 then redis.call('DEL', KEYS[1]) end\n"              \
    "else\n"                                                                \
    "  redis.call('DEL', KEYS[1])\n"                                        \
    "end\n"                                                                 \
    "if not wake then return 1 end\n"                                       \
    "if redis.call('EXISTS', KEYS[4]) == 0 then redis.call('RPUSH', KEYS[4], '1') end\n" \
    "redis.call('PEXPIRE', KEYS[4], 1000)\n"                                \
    "redis.call('PUBLISH', 'redlock:wake', KEYS[1])\n"                      \
    "return 3\n"

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
 * A waiter inside nginx ("p" in ACQUIRE) blocks on no connection: its
 * hand-off goes, instead of the list, as "<token> fence server-ms" on the
 * channel "redlock:wake", where its worker's subscriber hands it to
 * exactly that waiter (redlock.ngx_wait): it too holds the lock with no
 * further request, and no list is left behind for it. One queue, one
 * script, whatever host each waiter runs in; a PUBLISH only for the
 * waiters that need one (a Cluster sends each to every node).
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
    "if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"         \
    "if not KEYS[2] or redis.call('EXISTS', KEYS[2]) == 0 then\n"           \
    "  redis.call('DEL', KEYS[1])\n"                                        \
    "  return 1\n"                                                          \
    "end\n"                                                                 \
    "if not KEYS[3] then return 2 end\n"                                    \
    REDLOCK_SCRIPT_FENCE_FUNCTION                                           \
    REDLOCK_SCRIPT_SERVE_QUEUE

/* KEYS[1] lock key, KEYS[2] the waiters queue, KEYS[3] the waiters' data,
 * KEYS[4] the caller's hand-off list, optionally KEYS[5] the wake-up list;
 * ARGV[1] token. A waiter that gives up leaves the queue; if the lock was
 * handed to it meanwhile, the answer is its hand-off's element ("fence
 * server-ms", as BLPOP would have returned it), or "held" when the key
 * holds its token without one (the element was popped, and the reply
 * lost): the caller then takes the lock, or releases it. Else false.
 * With KEYS[5]: a waiter that leaves from the front of the queue while
 * the key is not a single lock's (free, readers, permits) wakes the
 * waiters behind it as a release does (the wake-up list, "redlock:wake"):
 * readers queued behind a writer that gave up would else wait for their
 * recheck while newcomers pass them. */
#define REDLOCK_SCRIPT_GIVE_UP                                              \
    "local front = KEYS[5] and redis.call('ZRANGE', KEYS[2], 0, 0)[1] == ARGV[1]\n" \
    "redis.call('ZREM', KEYS[2], ARGV[1])\n"                                \
    "redis.call('HDEL', KEYS[3], ARGV[1])\n"                                \
    "local handed = redis.call('LPOP', KEYS[4])\n"                          \
    "redis.call('DEL', KEYS[4])\n"                                          \
    "local v = redis.pcall('GET', KEYS[1])\n"                               \
    "if type(v) == 'table' then\n"                                          \
    "  local s = redis.pcall('ZSCORE', KEYS[1], ARGV[1])\n"                 \
    "  v = type(s) == 'string' and tonumber(s) > 0 and ARGV[1]\n"           \
    "end\n"                                                                 \
    "if front and type(v) ~= 'string' and redis.call('EXISTS', KEYS[2]) == 1 then\n" \
    "  if redis.call('EXISTS', KEYS[5]) == 0 then redis.call('RPUSH', KEYS[5], '1') end\n" \
    "  redis.call('PEXPIRE', KEYS[5], 1000)\n"                              \
    "  redis.call('PUBLISH', 'redlock:wake', KEYS[1])\n"                    \
    "end\n"                                                                 \
    "if v ~= ARGV[1] then return false end\n"                               \
    "return handed or 'held'\n"

/* KEYS[1] lock key; ARGV[1] token, ARGV[2] new ttl in ms.
 * Compare-and-PEXPIRE: a bare EXPIRE could extend somebody else's lock.
 * A semaphore's permit (the key a sorted set, see above) is extended the
 * same way: its score moves to now + ttl if it has not expired, and the
 * key's PEXPIRE follows the latest permit. One script for every kind, so
 * the renewal thread renews permits as it renews locks. A sorted set
 * without our marker member ("limit" or "shared") is another
 * application's: 0, and nothing is touched. */
#define REDLOCK_SCRIPT_EXTEND                                               \
    "local v = redis.pcall('GET', KEYS[1])\n"                               \
    "if v == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end\n" \
    "if type(v) ~= 'table' or redis.call('TYPE', KEYS[1]).ok ~= 'zset' then return 0 end\n" \
    "if not (redis.call('ZSCORE', KEYS[1], 'limit') or redis.call('ZSCORE', KEYS[1], 'shared')) then return 0 end\n" \
    "if not (redis.replicate_commands and redis.replicate_commands()) then return 0 end\n" \
    REDLOCK_SCRIPT_NOW                                                      \
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)\n"                     \
    "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"                    \
    "if not s or tonumber(s) <= 0 then return 0 end\n"                      \
    "redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])\n" \
    REDLOCK_SCRIPT_SET_TTL("KEYS[1]")                                       \
    "return 1\n"

/* KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] (optional) its waiters
 * queue. Returns {value or false, pttl, counter, waiters}: what `redlock
 * status` shows (the counter: the last fence the server gave, for any key:
 * the fence of the stream's last ID, or the string counter of a server
 * without streams; waiters: how many are queued), read in one atomic step.
 * For a semaphore the value is {limit, token, ms left, token, ms left, ...}
 * (its unexpired permits, earliest first), for readers the same with -1
 * for the limit; {0} for a key of another type. */
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
    "local v = redis.pcall('GET', KEYS[1])\n"                               \
    "local out = {v, redis.call('PTTL', KEYS[1]), last,\n"                  \
    "  KEYS[3] and redis.call('ZCARD', KEYS[3]) or 0}\n"                    \
    "if type(v) == 'table' then\n"                                          \
    "  out[1] = {0}\n"                                                      \
    "  local z = redis.call('TYPE', KEYS[1]).ok == 'zset'\n"                 \
    "  local l = z and (redis.call('ZSCORE', KEYS[1], 'limit') or redis.call('ZSCORE', KEYS[1], 'shared'))\n" \
    "  if l then\n"                                                         \
    REDLOCK_SCRIPT_NOW                                                      \
    "    out[1][1] = l == '-1' and redis.call('ZSCORE', KEYS[1], 'shared') and -1 or -tonumber(l)\n" \
    "    local all = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')\n" \
    "    for i = 1, #all, 2 do\n"                                           \
    "      out[1][#out[1] + 1] = all[i]\n"                                  \
    "      out[1][#out[1] + 1] = tonumber(all[i + 1]) - now\n"              \
    "    end\n"                                                             \
    "  end\n"                                                               \
    "end\n"                                                                 \
    "return out\n"

/* KEYS[1] fence counter; ARGV[1] a fence. Raises the counter to at least
 * the fence, never lowers it: the stream's last ID to the fence's (an
 * explicit XADD, refused when the last ID is already higher), or a string
 * counter's value. Returns 1, or the server's error (never 1 without
 * the counter raised). Redlock writes a lock's fence back to the
 * servers that granted it, so that the next majority, which shares a
 * server with this one, counts past it. */
#define REDLOCK_SCRIPT_FENCE_RAISE                                          \
    REDLOCK_SCRIPT_FENCE_FUNCTION                                           \
    "local f = tonumber(ARGV[1])\n"                                        \
    "local s = f % 100\n"                                                   \
    "local r = xadd(KEYS[1], string.format('%.0f-%d', (f - s) / 100 + EPOCH, s))\n" \
    "if type(r) == 'string' or failed(r, 'smaller') then return 1 end\n"   \
    "if not (failed(r, 'nknown') or failed(r, 'WRONGTYPE')) then return redis.error_reply(r.err) end\n" \
    "local c = tonumber(redis.call('GET', KEYS[1]) or '0')\n"              \
    "if c < f then redis.call('SET', KEYS[1], ARGV[1]) end\n"              \
    "return 1\n"

/* A permit of a counting semaphore (see the layout above). KEYS[1] the
 * key, KEYS[2] the waiters queue, KEYS[3] the waiters' data, KEYS[4] the
 * caller's hand-off list, KEYS[5] the fence counter (the single lock's
 * companions and counter; a waiter's data ends " s<its limit>", so that only
 * semaphore waiters are handed permits, and no other release hands a
 * semaphore waiter a lock); ARGV[1] token, ARGV[2] ttl ms, ARGV[3] the
 * limit N, ARGV[4] "0" for a caller that does not wait, else the ms its
 * next block lasts at most (as ACQUIRE's ARGV[3]), ARGV[5] "h", "p" or "w"
 * (as ACQUIRE's ARGV[4]), ARGV[6] "1" for a fence, "0" for none.
 * Answers {1, fence} (granted; 0 without a fence), {0, ms until the
 * earliest permit expires[, server ms]} (refused; a waiter joins the
 * queue as in ACQUIRE), {2, M} (misuse: the key is a semaphore of limit M,
 * or M = 0: it is no semaphore, e.g. a single lock's string).
 * A permit is granted when fewer than N unexpired permits exist and fewer
 * live waiters than free permits are queued before the caller (a newcomer
 * queues behind every waiter: the first waiter gets a freed permit; a
 * live waiter there queued with another limit is misuse, {2, its limit},
 * as the queue outlives the key); our
 * own token found again is refreshed (a retry after a lost reply, or a
 * hand-off found before its BLPOP). The limit is read before anything is
 * written: a different N is refused while any permit is unexpired. */
#define REDLOCK_SCRIPT_SEM_ACQUIRE                                          \
    REDLOCK_SCRIPT_FENCE_FUNCTION                                           \
    "if not seeded then return redis.error_reply('semaphores need Redis 3.2 or later') end\n" \
    "local key, limit, ttl = KEYS[1], tonumber(ARGV[3]), tonumber(ARGV[2])\n" \
    "local counter = ARGV[6] == '1' and KEYS[5]\n"                          \
    REDLOCK_SCRIPT_NOW                                                      \
    "local kind = redis.call('TYPE', key).ok\n"                             \
    "if kind == 'zset' then\n"                                              \
    "  local l = redis.call('ZSCORE', key, 'limit')\n"                      \
    "  if not l then return {2, 0} end\n"                                   \
    "  redis.call('ZREMRANGEBYSCORE', key, 0, now)\n"                       \
    "  if redis.call('ZCARD', key) == 1 then redis.call('DEL', key)\n"      \
    "  elseif -tonumber(l) ~= limit then return {2, -tonumber(l)} end\n"    \
    "elseif kind ~= 'none' then return {2, 0} end\n"                        \
    REDLOCK_SCRIPT_HOLDERS_GRANT("-limit", "limit")                           \
    "if redis.call('ZSCORE', key, ARGV[1]) then return grant() end\n"      \
    "local free = limit - math.max(0, redis.call('ZCARD', key) - 1)\n"      \
    "local ahead, i = 0, 0\n"                                               \
    "while ahead < free do\n"                                               \
    "  local m = redis.call('ZRANGE', KEYS[2], i, i)[1]\n"                  \
    "  if not m or m == ARGV[1] then break end\n"                           \
    "  local d = redis.call('HGET', KEYS[3], m)\n"                          \
    "  local alive, n\n"                                                    \
    "  if d then alive, n = string.match(d, '^(%d+) %d+ %d s(%d*)$') end\n" \
    "  if alive and tonumber(alive) >= now and n ~= '' and tonumber(n) ~= limit then\n" \
    "    return {2, tonumber(n)}\n"                                         \
    "  end\n"                                                               \
    "  if alive and tonumber(alive) >= now then ahead, i = ahead + 1, i + 1\n" \
    "  else redis.call('ZREM', KEYS[2], m) redis.call('HDEL', KEYS[3], m) end\n" \
    "end\n"                                                                 \
    "if free > ahead then return grant() end\n"                             \
    "local first = redis.call('ZRANGE', key, 1, 1, 'WITHSCORES')\n"         \
    "local pttl = first[2] and math.max(0, tonumber(first[2]) - now) or 0\n" \
    "if ARGV[4] == '0' then return {0, pttl} end\n"                         \
    REDLOCK_SCRIPT_JOIN_QUEUE("ARGV[4]", "ARGV[5]", "' s' .. ARGV[3]")

/* Gives a permit back. KEYS[1] the key, KEYS[2] the waiters queue, KEYS[3]
 * the waiters' data, KEYS[4] the wake-up list, KEYS[5] the fence counter;
 * ARGV[1] token, ARGV[2] what a waiter's hand-off list is named, less its
 * token. Answers 0 (not ours: no unexpired permit of that token; the
 * "limit" member is no permit), 1 (given back), 2 (misuse: the key holds
 * a value that is no semaphore, e.g. readers or another application's
 * sorted set; read before anything is written, and nothing is), 3 (given
 * back, and waiters served). A waiter queued with another limit (misuse)
 * is woken and dropped, never handed a permit: its next attempt learns
 * of the mismatch. Each permit free after ours is gone goes to the next
 * live semaphore waiter of the queue, front first, in this same step (its token
 * with its own ttl as in RELEASE's hand-off, a new fence, and "fence
 * server-ms" told it by REDLOCK_SCRIPT_HAND: its hand-off list, or a
 * message to its worker's subscriber inside nginx); a waiter that is only
 * woken (replicas; inside nginx before its worker's subscriber listens)
 * stops the hand-offs there and is woken, as RELEASE does; so does a
 * hand-off whose fence fails (see SERVE_QUEUE). The key's
 * PEXPIRE follows its latest permit; no permit left deletes it. */
#define REDLOCK_SCRIPT_SEM_RELEASE                                          \
    REDLOCK_SCRIPT_FENCE_FUNCTION                                           \
    REDLOCK_SCRIPT_HAND                                                     \
    "if not seeded then return 0 end\n"                                     \
    "local key = KEYS[1]\n"                                                 \
    "local kind = redis.call('TYPE', key).ok\n"                              \
    "if kind == 'none' or kind == 'string' then return 0 end\n"             \
    "local l = kind == 'zset' and redis.call('ZSCORE', key, 'limit')\n"     \
    "if not l then return 2 end\n"                                          \
    REDLOCK_SCRIPT_NOW                                                      \
    "redis.call('ZREMRANGEBYSCORE', key, 0, now)\n"                         \
    "local s = redis.call('ZSCORE', key, ARGV[1])\n"                        \
    "if not s or tonumber(s) <= 0 then\n"                                   \
    REDLOCK_SCRIPT_SET_TTL("key")                                           \
    "  return 0\n"                                                          \
    "end\n"                                                                 \
    "redis.call('ZREM', key, ARGV[1])\n"                                    \
    "local free = -tonumber(l) - (redis.call('ZCARD', key) - 1)\n"          \
    "local r, wake = 1, false\n"                                            \
    "while free > 0 do\n"                                                   \
    "  local front = redis.call('ZRANGE', KEYS[2], 0, 0)[1]\n"              \
    "  if not front then break end\n"                                       \
    "  local d = redis.call('HGET', KEYS[3], front)\n"                      \
    "  local alive, ttl, fenced, n\n"                                       \
    "  if d then alive, ttl, fenced, n = string.match(d, '^(%d+) (%d+) (%d) s(%d*)$') end\n" \
    "  if alive and n ~= '' and tonumber(n) ~= -tonumber(l) then alive, wake = nil, true end\n" \
    "  if alive and tonumber(alive) >= now then\n"                          \
    "    if ttl == '0' then wake = true break end\n"                        \
    "    local f = hand_fence(fenced)\n"                                    \
    "    if not f then wake = true break end\n"                             \
    "    if not hand(front, f, ttl, now, fenced) then wake = true break end\n" \
    "    redis.call('ZADD', key, string.format('%.0f', now + tonumber(ttl)), front)\n" \
    "    free, r = free - 1, 3\n"                                           \
    "  elseif not alive then wake = true\n"                                 \
    "  end\n"                                                               \
    "  redis.call('ZREM', KEYS[2], front)\n"                                \
    "  redis.call('HDEL', KEYS[3], front)\n"                                \
    "end\n"                                                                 \
    REDLOCK_SCRIPT_SET_TTL("key")                                           \
    "if not wake then return r end\n"                                       \
    "if redis.call('EXISTS', KEYS[4]) == 0 then redis.call('RPUSH', KEYS[4], '1') end\n" \
    "redis.call('PEXPIRE', KEYS[4], 1000)\n"                                \
    "redis.call('PUBLISH', 'redlock:wake', key)\n"                          \
    "return 3\n"

/* A group lock: several keys at once, all or nothing, each in the single
 * lock's layout (SET key token PX ttl, one token for the group), so a
 * group and a single lock of one of its keys exclude each other. KEYS[1..n]
 * the keys (one server, or one Cluster slot), then the fence counter when
 * one is asked for; ARGV[1] token, ARGV[2] ttl ms, ARGV[3] n.
 * Answers {1, fence of key 1, ..., fence of key n} (fences 0 without a
 * counter), {0, pttl, i} (key i is held by another token, or by readers:
 * nothing was written), {2, M, i} (misuse: key i is a semaphore of limit
 * M, or M = 0 not a lock at all). Every key is read, and every fence
 * taken (a counter that fails leaves nothing held), before any key is
 * written. */
#define REDLOCK_SCRIPT_GROUP_ACQUIRE                                        \
    REDLOCK_SCRIPT_FENCE_FUNCTION                                           \
    "local n = tonumber(ARGV[3])\n"                                         \
    "local counter = #KEYS > n and KEYS[n + 1]\n"                           \
    "local mine = {}\n"                                                     \
    "for i = 1, n do\n"                                                     \
    "  local v = redis.pcall('GET', KEYS[i])\n"                             \
    REDLOCK_SCRIPT_NOT_A_LOCK("v", "KEYS[i]", ", i")                        \
    "  if v and v ~= ARGV[1] then return {0, redis.call('PTTL', KEYS[i]), i} end\n" \
    "  mine[i] = v\n"                                                       \
    "end\n"                                                                 \
    "local out = {1}\n"                                                     \
    "for i = 1, n do out[i + 1] = fence(counter) end\n"                     \
    "for i = 1, n do\n"                                                     \
    "  if mine[i] then redis.call('PEXPIRE', KEYS[i], ARGV[2])\n"           \
    "  else redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2]) end\n"       \
    "end\n"                                                                 \
    "return out\n"

/* A group lock that waits: it joins the waiters queue of the key that
 * refused it (KEYS[1]; KEYS[2] the queue, KEYS[3] the data, KEYS[4] the
 * caller's hand-off list, emptied) as a waiter that is only woken (ttl 0:
 * a release wakes it, nobody hands it one key of its group), and, as a
 * writer, keeps later readers out. ARGV[1] token, ARGV[2] the ms its next
 * block lasts at most. Answers {0, pttl, server ms} (queued), {1} (the key
 * is free or ours now: try again at once). A server without TIME (before
 * 3.2) queues it as ACQUIRE does there (no data: every release wakes) and
 * answers {0, pttl, 0}. */
#define REDLOCK_SCRIPT_GROUP_WAIT                                           \
    "local cur = redis.pcall('GET', KEYS[1])\n"                             \
    "if cur == false or cur == ARGV[1] then return {1} end\n"               \
    "local counter = false\n"                                               \
    "if not (redis.replicate_commands and redis.replicate_commands()) then\n" \
    "  redis.call('DEL', KEYS[4])\n"                                        \
    "  if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then redis.call('ZADD', KEYS[2], 0, ARGV[1]) end\n" \
    "  if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end\n" \
    "  return {0, redis.call('PTTL', KEYS[1]), 0}\n"                        \
    "end\n"                                                                 \
    REDLOCK_SCRIPT_NOW                                                      \
    "local pttl = redis.call('PTTL', KEYS[1])\n"                            \
    REDLOCK_SCRIPT_JOIN_QUEUE("ARGV[2]", "'w'", "''")

/* KEYS[1..n] a group's keys (one server or one slot), KEYS[n+1..2n] their
 * waiters queues; ARGV[1] token. Each key that holds the token is deleted
 * when nobody waits for it (no queue) or ARGV[2] is "all" (Redlock, whose
 * waiters poll), else left for the single lock's five-key RELEASE, which
 * hands it over or wakes its waiters. Answers {how many held the token,
 * the indexes of those left...}. */
#define REDLOCK_SCRIPT_GROUP_RELEASE                                        \
    "local n, owned, left = #KEYS / 2, 0, {}\n"                             \
    "for i = 1, n do\n"                                                     \
    "  if redis.pcall('GET', KEYS[i]) == ARGV[1] then\n"                    \
    "    owned = owned + 1\n"                                               \
    "    if ARGV[2] == 'all' or redis.call('EXISTS', KEYS[n + i]) == 0 then redis.call('DEL', KEYS[i])\n" \
    "    else left[#left + 1] = i end\n"                                    \
    "  end\n"                                                               \
    "end\n"                                                                 \
    "table.insert(left, 1, owned)\n"                                        \
    "return left\n"

/* KEYS[1..n] a group's keys; ARGV[1] token, ARGV[2] ttl ms. PEXPIRE of
 * each key that holds the token; answers 1 when every key did, else 0. */
#define REDLOCK_SCRIPT_GROUP_EXTEND                                         \
    "local n = 0\n"                                                         \
    "for i = 1, #KEYS do\n"                                                 \
    "  if redis.pcall('GET', KEYS[i]) == ARGV[1] then\n"                    \
    "    redis.call('PEXPIRE', KEYS[i], ARGV[2])\n"                         \
    "    n = n + 1\n"                                                       \
    "  end\n"                                                               \
    "end\n"                                                                 \
    "return n == #KEYS and 1 or 0\n"

/* Readers and writers (opts.shared = true for a reader). A writer is a
 * single lock (ACQUIRE, RELEASE: SET key <token> PX ttl). Readers hold the
 * key as a sorted set: member "shared" with score -1, and each reader's
 * token with its expiry (server ms); the key's PEXPIRE is the latest
 * reader's expiry, so while any reader holds, the key exists (a plain SET
 * NX fails, and ACQUIRE sees it held: its writer waits in the queue).
 * Waiting readers are in the same waiters queue as writers, their data
 * ending " r"; a writer waiting there keeps every reader that comes after
 * it out, and the release that frees the key lets the readers at the
 * front in together (REDLOCK_SCRIPT_SERVE_QUEUE).
 *
 * RW_READ: KEYS[1] key, KEYS[2] waiters queue, KEYS[3] their data,
 * KEYS[4] the caller's hand-off list, KEYS[5] fence counter; ARGV[1]
 * token, ARGV[2] ttl ms, ARGV[3] "0" for a caller that does not wait,
 * else the ms of its next block, ARGV[4] "h", "p" or "w" (as ACQUIRE's),
 * ARGV[5] "1" for a fence. Answers {1, fence}, {0, pttl[, server ms]} (a writer holds it,
 * or waits before us in the queue), {2, M} (misuse: a semaphore of limit
 * M, or another value). A reader is let in when the key is free or held
 * by readers, and no live writer waits before it in the queue. */
#define REDLOCK_SCRIPT_RW_READ                                              \
    REDLOCK_SCRIPT_FENCE_FUNCTION                                           \
    "if not seeded then return redis.error_reply('readers need Redis 3.2 or later') end\n" \
    "local key, ttl = KEYS[1], tonumber(ARGV[2])\n"                         \
    "local counter = ARGV[5] == '1' and KEYS[5]\n"                          \
    REDLOCK_SCRIPT_NOW                                                      \
    "local kind, pttl = redis.call('TYPE', key).ok, nil\n"                  \
    "if kind == 'string' then pttl = redis.call('PTTL', key)\n"             \
    "elseif kind == 'zset' then\n"                                          \
    "  if not redis.call('ZSCORE', key, 'shared') then\n"                   \
    "    local l = redis.call('ZSCORE', key, 'limit')\n"                    \
    "    return {2, l and -tonumber(l) or 0}\n"                             \
    "  end\n"                                                               \
    "  redis.call('ZREMRANGEBYSCORE', key, 0, now)\n"                       \
    "  if redis.call('ZCARD', key) == 1 then redis.call('DEL', key) kind = 'none' end\n" \
    "elseif kind ~= 'none' then return {2, 0} end\n"                        \
    REDLOCK_SCRIPT_HOLDERS_GRANT("-1", "shared")                           \
    "if kind == 'zset' and redis.call('ZSCORE', key, ARGV[1]) then return grant() end\n" \
    "if not pttl then\n"                                                    \
    "  local i, writer = 0, false\n"                                        \
    "  while true do\n"                                                     \
    "    local m = redis.call('ZRANGE', KEYS[2], i, i)[1]\n"                \
    "    if not m or m == ARGV[1] then break end\n"                         \
    "    local d = redis.call('HGET', KEYS[3], m)\n"                        \
    "    local alive, rd\n"                                                 \
    "    if d then alive, rd = string.match(d, '^(%d+) %d+ %d( ?r?)$') end\n" \
    "    if not alive or tonumber(alive) < now then\n"                      \
    "      redis.call('ZREM', KEYS[2], m)\n"                                \
    "      redis.call('HDEL', KEYS[3], m)\n"                                \
    "    elseif rd ~= ' r' then writer = true break\n"                      \
    "    else i = i + 1 end\n"                                              \
    "  end\n"                                                               \
    "  if not writer then return grant() end\n"                             \
    "  pttl = kind == 'zset' and redis.call('PTTL', key) or 1000\n"          \
    "end\n"                                                                 \
    "if ARGV[3] == '0' then return {0, pttl} end\n"                         \
    REDLOCK_SCRIPT_JOIN_QUEUE("ARGV[3]", "ARGV[4]", "' r'")

/* A reader leaves. KEYS[1] key, KEYS[2] waiters queue, KEYS[3] their data,
 * KEYS[4] the wake-up list, KEYS[5] fence counter; ARGV[1] token, ARGV[2]
 * the hand-off lists' prefix. Answers 0 (not ours: no unexpired reader of
 * that token), 1 (left), 3 (left last, and the key went to the waiters:
 * REDLOCK_SCRIPT_SERVE_QUEUE, so a waiting writer gets it in this step).
 * While other readers hold, the key's PEXPIRE follows the latest. */
#define REDLOCK_SCRIPT_RW_RELEASE_READ                                      \
    REDLOCK_SCRIPT_FENCE_FUNCTION                                           \
    "if not seeded then return 0 end\n"                                     \
    "local key = KEYS[1]\n"                                                 \
    "if redis.call('TYPE', key).ok ~= 'zset' or not redis.call('ZSCORE', key, 'shared') then return 0 end\n" \
    "do\n"                                                                  \
    REDLOCK_SCRIPT_NOW                                                      \
    "  redis.call('ZREMRANGEBYSCORE', key, 0, now)\n"                       \
    "  local s = redis.call('ZSCORE', key, ARGV[1])\n"                      \
    "  if not s or tonumber(s) <= 0 then\n"                                 \
    REDLOCK_SCRIPT_SET_TTL("key")                                           \
    "    return 0\n"                                                        \
    "  end\n"                                                               \
    "  redis.call('ZREM', key, ARGV[1])\n"                                  \
    "  if redis.call('ZCARD', key) > 1 then\n"                              \
    REDLOCK_SCRIPT_SET_TTL("key")                                           \
    "    return 1\n"                                                        \
    "  end\n"                                                               \
    "end\n"                                                                 \
    REDLOCK_SCRIPT_SERVE_QUEUE

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
