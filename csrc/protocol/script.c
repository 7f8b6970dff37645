/* Script registry: the texts of scripts/NAME.lua (embedded by tools/embed.sh
 * into the generated scripts_gen.h), named by SHA-1 for EVALSHA. */
#include "scripts.h"

#include <string.h>

#include "scripts_gen.h"
#include "sha1.h"

static redlock_script scripts[] = {
    REDLOCK_SCRIPT_LIST
    {NULL, NULL, ""},
};

redlock_script *redlock_scripts(void) {
    redlock_script *s;
    for (s = scripts; s->name != NULL; s++)
        if (s->sha[0] == '\0')
            redlock_sha1_hex(s->source, strlen(s->source), s->sha);
    return scripts;
}

const redlock_script *redlock_script_find(const char *name) {
    redlock_script *s;
    for (s = redlock_scripts(); s->name != NULL; s++)
        if (strcmp(s->name, name) == 0)
            return s;
    return NULL;
}

/* The fence of a counter stream's ID "ms-seq" (scripts/parts/fence.lua has
 * the rule's server side, and REDLOCK_FENCE_EPOCH_MS): (ms - epoch) * 100 + seq; -1 when
 * seq is 100 or more (it would reach the next ms's fences: the acquire
 * script takes the next ms's first ID instead), the fence would be 2^53
 * or more (not exact as a double), the ID is before the epoch or its
 * first (fence 0 means "none"), or the ID is malformed. */
long long redlock_fence_of_id(const char *s, size_t len) {
    unsigned long long ms = 0, seq = 0;
    size_t i = 0, digits = 0;
    for (; i < len && s[i] >= '0' && s[i] <= '9' && digits < 19; i++, digits++)
        ms = ms * 10 + (unsigned long long)(s[i] - '0');
    if (digits == 0 || i >= len || s[i] != '-' || ms < (unsigned long long)REDLOCK_FENCE_EPOCH_MS)
        return -1;
    for (i++, digits = 0; i < len && s[i] >= '0' && s[i] <= '9' && digits < 3; i++, digits++)
        seq = seq * 10 + (unsigned long long)(s[i] - '0');
    if (digits == 0 || i != len || seq >= 100)
        return -1;
    ms -= (unsigned long long)REDLOCK_FENCE_EPOCH_MS;
    /* (a fence from 2^53 on would not be exact as a Lua 5.1 number) */
    if (ms > (1ULL << 53) / 100 || ms * 100 + seq >= (1ULL << 53))
        return -1;
    /* (fence 0 means "none": the epoch's first ID goes to the script,
     * which takes the next one) */
    if (ms == 0 && seq == 0)
        return -1;
    return (long long)(ms * 100 + seq);
}
