/* The registry of the Redis-side scripts. The scripts themselves are
 * scripts/NAME.lua (see docs/development.md, The Redis scripts): each runs
 * atomically on the server, which is what makes "check the token, then
 * act" safe: no other client can act between the check and the act. Keys
 * and values arrive as KEYS/ARGV, never spliced into the text, so a key
 * can hold any bytes. tools/embed.sh turns them into $(BUILD)/gen/
 * scripts_gen.h at build time, which only script.c includes. */
#ifndef REDLOCK_SCRIPTS_H
#define REDLOCK_SCRIPTS_H

#include <stddef.h>

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

typedef struct {
    const char *name;
    const char *source;
    char sha[41];
} redlock_script;

/* The table of scripts (one per scripts/NAME.lua, named NAME), with their
 * SHA-1 names filled in once. */
redlock_script *redlock_scripts(void);
const redlock_script *redlock_script_find(const char *name);
/* The fence of a counter stream's ID, -1 when it gives none (script.c). */
long long redlock_fence_of_id(const char *s, size_t len);

#endif
