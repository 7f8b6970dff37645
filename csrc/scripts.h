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
