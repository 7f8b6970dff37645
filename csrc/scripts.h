/* The Redis-side scripts. Each runs atomically on the server, which is what
 * makes "check the token, then act" safe: no other client can act between
 * the check and the act. Keys and values arrive as KEYS/ARGV, never spliced
 * into the text, so a key can hold any bytes. */
#ifndef REDLOCK_SCRIPTS_H
#define REDLOCK_SCRIPTS_H

/* The texts, one per scripts/NAME.lua (their documentation is there):
 * csrc/scripts_gen.h, which tools/embed.lua writes. REDLOCK_SCRIPT_ACQUIRE
 * and so on, and REDLOCK_SCRIPT_LIST(X), every script as X(name, text). */
#include "scripts_gen.h"

typedef struct {
    const char *name;
    const char *source;
    char sha[41];
} redlock_script;

/* The table of scripts, with their SHA-1 names filled in once. */
redlock_script *redlock_scripts(void);
const redlock_script *redlock_script_find(const char *name);

#endif
