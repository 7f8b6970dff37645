/* Draws a token (filling the pool), forks, and prints 8 more tokens from the
 * parent and 8 from the child, each prefixed with who drew it. A pool that
 * survived the fork would print the same tokens twice: spec/01 checks not. */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "token.h"

static redlock_token_pool pool;

static int draw(const char *who) {
    char hex[REDLOCK_TOKEN_HEX + 1];
    int i;
    for (i = 0; i < 8; i++) {
        if (redlock_token_hex(&pool, hex) != 0)
            return 1;
        printf("%s %s\n", who, hex);
    }
    fflush(stdout);
    return 0;
}

int main(void) {
    char first[REDLOCK_TOKEN_HEX + 1];
    pid_t pid;
    int status = 0;
    if (redlock_token_hex(&pool, first) != 0)
        return 1;
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0)
        _exit(draw("child"));
    if (draw("parent") != 0)
        return 1;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
