/* A Lua module for specs: fork(), wait(pid) and exit(code) (_exit, so a
 * forked child of busted runs no more of busted), for Lua 5.1 to 5.4 and
 * LuaJIT. spec/04 forks a process that has used a client. */
#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static int t_fork(lua_State *L) {
    pid_t pid;
    fflush(NULL); /* or buffered output would be written twice */
    pid = fork();
    if (pid < 0)
        return luaL_error(L, "fork failed");
    lua_pushinteger(L, (lua_Integer)pid);
    return 1;
}

/* wait(pid) -> exit status, or 128 + signal */
static int t_wait(lua_State *L) {
    pid_t pid = (pid_t)luaL_checkinteger(L, 1);
    int status = 0;
    if (waitpid(pid, &status, 0) < 0)
        return luaL_error(L, "waitpid failed");
    lua_pushinteger(L, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return 1;
}

static int t_exit(lua_State *L) {
    int code = (int)luaL_optinteger(L, 1, 0);
    fflush(NULL);
    _exit(code);
    return 0;
}

int luaopen_forktest(lua_State *L) {
    lua_newtable(L);
    lua_pushcfunction(L, t_fork);
    lua_setfield(L, -2, "fork");
    lua_pushcfunction(L, t_wait);
    lua_setfield(L, -2, "wait");
    lua_pushcfunction(L, t_exit);
    lua_setfield(L, -2, "exit");
    return 1;
}
