/* The encoder's size check, driven with made-up argument lengths (the
 * pointers all name one byte): a check that let the sum wrap would size a
 * small buffer and copy gigabytes into it. Prints "ok <n>" per check and
 * exits 0; spec/01 runs it (also under the sanitizers' build). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resp.h"

static int failures;

static void check(int n, int ok, const char *what) {
    printf("%s %d - %s\n", ok ? "ok" : "not ok", n, what);
    if (!ok)
        failures++;
}

int main(void) {
    static const char one[] = "x";
    static const char set_k_v[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n";
    const char *argv[3] = {one, one, one};
    const char *cmd[3] = {"SET", "k", "v"};
    size_t lens[3];
    char buf[128], *out = NULL;
    long len;

    len = redlock_encode(buf, sizeof buf, 3, cmd, NULL, &out);
    check(1, len == (long)sizeof set_k_v - 1 && out == buf && memcmp(buf, set_k_v, sizeof set_k_v - 1) == 0,
          "a short command is written into the caller's buffer");
    len = redlock_encode(buf, 16, 3, cmd, NULL, &out);
    check(2, len == (long)sizeof set_k_v - 1 && out != buf && out != NULL &&
                 memcmp(out, set_k_v, sizeof set_k_v - 1) == 0,
          "one that may not fit is written into memory of its own");
    if (len >= 0 && out != buf)
        free(out);

    /* the first argument leaves less room than any argument takes */
    lens[0] = (size_t)LONG_MAX - 55;
    lens[1] = 0;
    check(3, redlock_encode(buf, sizeof buf, 2, argv, lens, &out) == -1,
          "refused: the bound would pass LONG_MAX by an empty argument");

    /* past LONG_MAX the old check wrapped: the second argument took the bound
     * to SIZE_MAX - 11 on 64 bits, and the third wrapped it to 113 */
    lens[1] = (size_t)LONG_MAX - 30;
    lens[2] = 100;
    check(4, redlock_encode(buf, sizeof buf, 3, argv, lens, &out) == -1,
          "refused: lengths whose sum wraps size_t");

    lens[0] = (size_t)-1;
    check(5, redlock_encode(buf, sizeof buf, 1, argv, lens, &out) == -1,
          "refused: one argument of SIZE_MAX bytes");
    return failures == 0 ? 0 : 1;
}
