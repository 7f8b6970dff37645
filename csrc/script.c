/* Script registry: texts from scripts.h, named by SHA-1 for EVALSHA. */
#include "scripts.h"

#include <string.h>

#include "sha1.h"

static redlock_script scripts[] = {
    {"acquire", REDLOCK_SCRIPT_ACQUIRE, ""},
    {"release", REDLOCK_SCRIPT_RELEASE, ""},
    {"extend", REDLOCK_SCRIPT_EXTEND, ""},
    {"status", REDLOCK_SCRIPT_STATUS, ""},
    {"fence_raise", REDLOCK_SCRIPT_FENCE_RAISE, ""},
    {"give_up", REDLOCK_SCRIPT_GIVE_UP, ""},
    {"sem_acquire", REDLOCK_SCRIPT_SEM_ACQUIRE, ""},
    {"sem_release", REDLOCK_SCRIPT_SEM_RELEASE, ""},
    {"rw_read", REDLOCK_SCRIPT_RW_READ, ""},
    {"rw_release_read", REDLOCK_SCRIPT_RW_RELEASE_READ, ""},
    {"group_acquire", REDLOCK_SCRIPT_GROUP_ACQUIRE, ""},
    {"group_release", REDLOCK_SCRIPT_GROUP_RELEASE, ""},
    {"group_extend", REDLOCK_SCRIPT_GROUP_EXTEND, ""},
    {"group_wait", REDLOCK_SCRIPT_GROUP_WAIT, ""},
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
