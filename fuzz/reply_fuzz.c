/* libFuzzer target: arbitrary bytes through hiredis' reader, and every reply
 * it yields through the reply-to-Lua conversion of the core. Finds crashes,
 * leaks (ASan) and undefined behaviour (UBSan) in reply.c. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <hiredis/hiredis.h>

#include "../csrc/compat.h"
#include "../csrc/protocol/reply.h"

/* hiredis 0.14 allocates an array's declared element count as soon as it
 * reads "*<n>", before any element arrives: a server that lies makes the
 * client allocate what it says (README: the server is trusted for memory).
 * That is hiredis' behaviour, not the conversion's, so inputs that declare
 * more than this many elements are skipped. */
#define MAX_DECLARED_ELEMENTS 100000

static int declares_huge_array(const uint8_t *data, size_t size) {
    size_t i, j;
    for (i = 0; i < size; i++) {
        unsigned long n = 0;
        if (data[i] != '*')
            continue;
        for (j = i + 1; j < size && data[j] >= '0' && data[j] <= '9' && j < i + 12; j++)
            n = n * 10 + (unsigned long)(data[j] - '0');
        if (n > MAX_DECLARED_ELEMENTS)
            return 1;
    }
    return 0;
}

/* (reply, spread): both ways a reply is pushed (conn:eval, conn:eval_values) */
static int convert(lua_State *L) {
    redisReply *r = (redisReply *)lua_touserdata(L, 1);
    int spread = lua_toboolean(L, 2);
    lua_settop(L, 0);
    return redlock_push_reply_free(L, r, spread);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static lua_State *L = NULL;
    redisReader *reader;
    void *reply = NULL;
    if (L == NULL)
        L = luaL_newstate();
    if (declares_huge_array(data, size))
        return 0;
    reader = redisReaderCreate();
    if (reader == NULL)
        abort();
    if (redisReaderFeed(reader, (const char *)data, size) == REDIS_OK) {
        while (redisReaderGetReply(reader, &reply) == REDIS_OK && reply != NULL) {
            lua_pushcfunction(L, convert);
            lua_pushlightuserdata(L, reply);
            lua_pushboolean(L, (int)(size & 1));
            /* convert owns and frees the reply, even when pushing raises */
            (void)lua_pcall(L, 2, LUA_MULTRET, 0);
            lua_settop(L, 0);
            reply = NULL;
        }
    }
    redisReaderFree(reader);
    lua_gc(L, LUA_GCCOLLECT, 0);
    return 0;
}
