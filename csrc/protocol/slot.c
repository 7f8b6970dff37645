/* Redis Cluster hash slots, for the keys the library adds beside a lock
 * key (its companions): a script may only touch keys of one slot, so each
 * companion must hash to the lock key's slot.
 *
 * keyslot(key) -> the slot (CRC16/XMODEM of the key's hash tag, or of the
 * whole key, mod 16384), as CLUSTER KEYSLOT answers it.
 * slot_tag(slot) -> a short string whose own slot is `slot`: "{tag}" at the
 * start of a companion key puts it there, whatever else the key holds. */
#include <stddef.h>
#include <string.h>

#include "compat.h"
#include "slot.h"

static unsigned crc16(const unsigned char *s, size_t len) {
    unsigned crc = 0;
    size_t i;
    int b;
    for (i = 0; i < len; i++) {
        crc ^= (unsigned)s[i] << 8;
        for (b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc;
}

unsigned redlock_keyslot(const char *key, size_t len) {
    const char *open = memchr(key, '{', len), *close;
    if (open != NULL) {
        size_t rest = len - (size_t)(open - key) - 1;
        close = memchr(open + 1, '}', rest);
        /* only the first '{' and the first '}' after it; an empty tag is none */
        if (close != NULL && close > open + 1)
            return crc16((const unsigned char *)open + 1, (size_t)(close - open - 1)) & 16383;
    }
    return crc16((const unsigned char *)key, len) & 16383;
}

/* Candidates "0", "1", ..., "z", "00", ...: every slot has one of at most
 * 4 characters (checked for all 16384 by spec/01). */
static const char ALPHABET[] = "0123456789abcdefghijklmnopqrstuvwxyz";

size_t redlock_slot_tag(unsigned slot, char out[8]) {
    unsigned long i, n;
    size_t len;
    const unsigned base = sizeof ALPHABET - 1;
    for (i = 0; i < 36UL * 36 * 36 * 36 * 2; i++) {
        n = i;
        len = 0;
        do {
            out[len++] = ALPHABET[n % base];
            n /= base;
        } while (n > 0 && len < 7);
        if ((crc16((const unsigned char *)out, len) & 16383) == slot) {
            out[len] = '\0';
            return len;
        }
    }
    return 0;
}

/* keyslot(key) */
static int core_keyslot(lua_State *L) {
    size_t len;
    const char *key = luaL_checklstring(L, 1, &len);
    lua_pushinteger(L, (lua_Integer)redlock_keyslot(key, len));
    return 1;
}

/* slot_tag(slot) */
static int core_slot_tag(lua_State *L) {
    lua_Integer slot = luaL_checkinteger(L, 1);
    char tag[8];
    size_t len;
    luaL_argcheck(L, slot >= 0 && slot < 16384, 1, "slot out of range");
    len = redlock_slot_tag((unsigned)slot, tag);
    if (len == 0)
        return luaL_error(L, "no tag found for slot %d", (int)slot);
    lua_pushlstring(L, tag, len);
    return 1;
}

void redlock_slot_open(lua_State *L) {
    lua_pushcfunction(L, core_keyslot);
    lua_setfield(L, -2, "keyslot");
    lua_pushcfunction(L, core_slot_tag);
    lua_setfield(L, -2, "slot_tag");
}
