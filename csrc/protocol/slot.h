#ifndef REDLOCK_SLOT_H
#define REDLOCK_SLOT_H

#include <stddef.h>

#include "compat.h"

/* The Redis Cluster slot of a key (CLUSTER KEYSLOT). */
unsigned redlock_keyslot(const char *key, size_t len);
/* A tag of at most 7 characters whose slot is `slot`, NUL-terminated in
 * out; its length, or 0 if none was found. */
size_t redlock_slot_tag(unsigned slot, char out[8]);
/* Adds keyslot and slot_tag to the module table on the stack's top. */
void redlock_slot_open(lua_State *L);

#endif
