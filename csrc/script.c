/* Script registry: the texts of scripts/NAME.lua (csrc/scripts_gen.h), named by
 * SHA-1 for EVALSHA. */
#include "scripts.h"

#include <string.h>

#include "sha1.h"

/* every scripts/NAME.lua (csrc/scripts_gen.h) */
#define SCRIPT(name, text) {name, text, ""},
static redlock_script scripts[] = {REDLOCK_SCRIPT_LIST(SCRIPT){NULL, NULL, ""}};
#undef SCRIPT

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
