/* Child processes for the `redlock` command: mechanism only. The policy
 * (renew the lock every ttl/3 while the child runs, what to do when the lock
 * is lost) lives in lua/redlock/cli/run.lua.
 *
 * proc.trap()                -> true: catch HUP INT QUIT TERM USR1 USR2,
 *                               remember the first one caught and forward
 *                               each to the running child
 * proc.spawn(argv [, opts])  -> pid | nil, msg, why ("not found" when
 *                               exec found no such file, "cannot execute"
 *                               for other exec failures, "system" when
 *                               pipe or fork failed)
 *                               opts.env {NAME = value} added to the child's
 *                               environment; opts.die_with_parent (Linux):
 *                               the child gets SIGTERM when we die
 * proc.wait(pid [, ms])      -> "exit", status | "signal", signo
 *                               | false (still running after ms) | nil, msg
 * proc.kill(pid, sig)        -> true | nil, msg   (sig: number or "TERM")
 * proc.caught()              -> number of the first signal caught, or nil
 * proc.signals               {HUP = 1, INT = 2, ...}
 *
 * The forwarding target is process-wide: the last child spawned, until
 * wait() reaps it. One supervised child at a time, as the command needs. */
#define _GNU_SOURCE
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#if defined(__linux__)
#include <sys/prctl.h>
#define CAN_DIE_WITH_PARENT 1
#else
#define CAN_DIE_WITH_PARENT 0
#endif

extern char **environ;

static const struct {
    const char *name;
    int sig;
} signal_names[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL},
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"CONT", SIGCONT},
    {"STOP", SIGSTOP}, {NULL, 0},
};

static const int forwarded[] = {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGTERM};
#define NFORWARDED ((int)(sizeof forwarded / sizeof forwarded[0]))

static volatile sig_atomic_t target_pid = 0; /* where signals go; 0: nowhere */
static volatile sig_atomic_t first_caught = 0;
static int trapped[NFORWARDED]; /* 1 where trap() installed on_signal */

static void on_signal(int sig, siginfo_t *info, void *uctx) {
    int saved = errno;
    (void)uctx;
    (void)info;
    if (first_caught == 0)
        first_caught = sig;
#ifdef SI_KERNEL
    /* Sent by the terminal (Ctrl-C) to the whole foreground process group,
     * the child included: forwarding it would deliver it twice. */
    if (info != NULL && info->si_code == SI_KERNEL) {
        errno = saved;
        return;
    }
#endif
    if (target_pid > 0)
        kill((pid_t)target_pid, sig);
    errno = saved;
}

static void forwarded_set(sigset_t *set) {
    int i;
    sigemptyset(set);
    for (i = 0; i < NFORWARDED; i++)
        sigaddset(set, forwarded[i]);
}

static int is_ignored(int sig) {
    struct sigaction old;
    if (sigaction(sig, NULL, &old) != 0)
        return 0;
    return !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN;
}

/* trap() -> true */
static int proc_trap(lua_State *L) {
    struct sigaction sa;
    int i;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    forwarded_set(&sa.sa_mask);
    for (i = 0; i < NFORWARDED; i++) {
        /* A signal ignored by whoever started us (nohup, `cmd &` in a
         * script) stays ignored, for us and, through exec, for the child. */
        if (trapped[i] || is_ignored(forwarded[i]))
            continue;
        if (sigaction(forwarded[i], &sa, NULL) == 0)
            trapped[i] = 1;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* caught() -> signal number | nil */
static int proc_caught(lua_State *L) {
    if (first_caught == 0)
        lua_pushnil(L);
    else
        lua_pushinteger(L, (lua_Integer)first_caught);
    return 1;
}

static void free_env(char **envp, int nadd) {
    int i;
    if (envp == NULL)
        return;
    for (i = 0; i < nadd; i++)
        free(envp[i]);
    free(envp);
}

/* Checks opts (stack slot 2) before anything is allocated: returns the
 * number of env additions, sets *die. Raises on misuse. */
static int check_opts(lua_State *L, int *die) {
    int nadd = 0;
    *die = 0;
    if (lua_isnoneornil(L, 2))
        return 0;
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_getfield(L, 2, "die_with_parent");
    *die = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 2, "env");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TTABLE)
            return luaL_argerror(L, 2, "field 'env' must be a table");
        lua_pushnil(L);
        while (lua_next(L, -2) != 0) {
            size_t len;
            const char *name;
            if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
                return luaL_argerror(L, 2, "env: string names and values expected");
            name = lua_tolstring(L, -2, &len);
            if (len == 0 || strchr(name, '=') != NULL || strlen(name) != len ||
                strlen(lua_tostring(L, -1)) != lua_rawlen(L, -1))
                return luaL_argerror(L, 2, "env: bad variable name or value");
            nadd++;
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    return nadd;
}

/* The child's environment: our additions first (allocated here), then every
 * entry of environ that they do not override (borrowed). NULL when out of
 * memory. The env table is reachable from opts, so its strings stay alive. */
static char **build_env(lua_State *L, int nadd) {
    char **envp, **e;
    int nenv = 0, k = 0, i, added;
    for (e = environ; *e != NULL; e++)
        nenv++;
    envp = (char **)calloc((size_t)nadd + (size_t)nenv + 1, sizeof *envp);
    if (envp == NULL)
        return NULL;
    if (nadd > 0) {
        lua_getfield(L, 2, "env");
        lua_pushnil(L);
        while (lua_next(L, -2) != 0) {
            size_t nl, vl;
            const char *name = lua_tolstring(L, -2, &nl), *value = lua_tolstring(L, -1, &vl);
            char *s = (char *)malloc(nl + vl + 2);
            if (s == NULL) {
                lua_pop(L, 3); /* value, key, env */
                free_env(envp, k);
                return NULL;
            }
            memcpy(s, name, nl);
            s[nl] = '=';
            memcpy(s + nl + 1, value, vl + 1);
            envp[k++] = s;
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    added = k;
    for (e = environ; *e != NULL; e++) {
        int overridden = 0;
        for (i = 0; i < added && !overridden; i++) {
            size_t nl = (size_t)(strchr(envp[i], '=') - envp[i]) + 1;
            overridden = strncmp(*e, envp[i], nl) == 0;
        }
        if (!overridden)
            envp[k++] = *e;
    }
    return envp;
}

/* In the child, between fork and exec: async-signal-safe calls only. */
static void run_child(char **argv, char **envp, int fd, int die, pid_t parent) {
    struct sigaction dfl;
    sigset_t none;
    int i, e;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (i = 0; i < NFORWARDED; i++)
        if (trapped[i])
            sigaction(forwarded[i], &dfl, NULL);
#if CAN_DIE_WITH_PARENT
    if (die && (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent))
        _exit(128 + SIGTERM); /* the parent died before prctl took effect */
#else
    (void)die;
    (void)parent;
#endif
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    environ = envp;
    execvp(argv[0], argv);
    e = errno;
    while (write(fd, &e, sizeof e) < 0 && errno == EINTR) {
    }
    _exit(127);
}

/* Reaps pid (blocking) and clears the forwarding target. */
static void reap(pid_t pid) {
    sigset_t set, old;
    forwarded_set(&set);
    sigprocmask(SIG_BLOCK, &set, &old);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    if (target_pid == pid)
        target_pid = 0;
    sigprocmask(SIG_SETMASK, &old, NULL);
}

static int push_spawn_error(lua_State *L, const char *cmd, int err, int exec_failed) {
    lua_pushnil(L);
    if (exec_failed) {
        lua_pushfstring(L, "cannot run '%s': %s", cmd, strerror(err));
        lua_pushstring(L, err == ENOENT ? "not found" : "cannot execute");
    } else {
        lua_pushfstring(L, "cannot start '%s': %s", cmd, strerror(err));
        lua_pushliteral(L, "system");
    }
    return 3;
}

/* spawn(argv [, opts]) -> pid | nil, msg, why */
static int proc_spawn(lua_State *L) {
    int argc, nadd, die, i, fds[2], err = 0, child_err = 0;
    char **argv, **envp;
    const char *cmd;
    sigset_t all, old;
    struct sigaction dfl;
    pid_t pid, self = getpid();
    ssize_t n;

    luaL_checktype(L, 1, LUA_TTABLE);
    argc = (int)lua_rawlen(L, 1);
    luaL_argcheck(L, argc >= 1, 1, "non-empty list of strings expected");
    for (i = 1; i <= argc; i++) {
        lua_rawgeti(L, 1, i);
        if (lua_type(L, -1) != LUA_TSTRING || strlen(lua_tostring(L, -1)) != lua_rawlen(L, -1))
            return luaL_argerror(L, 1, "list of strings without NUL bytes expected");
        lua_pop(L, 1);
    }
    nadd = check_opts(L, &die);
    lua_rawgeti(L, 1, 1);
    cmd = lua_tostring(L, -1); /* stays alive in argv[1] */
    lua_pop(L, 1);

    /* From here on: no raising until everything allocated is freed. */
    argv = (char **)calloc((size_t)argc + 1, sizeof *argv);
    envp = argv != NULL ? build_env(L, nadd) : NULL;
    if (argv == NULL || envp == NULL) {
        free(argv);
        return push_spawn_error(L, cmd, ENOMEM, 0);
    }
    for (i = 1; i <= argc; i++) {
        lua_rawgeti(L, 1, i);
        argv[i - 1] = (char *)lua_tostring(L, -1); /* alive in the argv table */
        lua_pop(L, 1);
    }
    if (pipe(fds) != 0) {
        err = errno;
        free(argv);
        free_env(envp, nadd);
        return push_spawn_error(L, cmd, err, 0);
    }
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    /* A process that ignores SIGCHLD has its children reaped by the kernel:
     * wait() could not learn the exit status. */
    if (is_ignored(SIGCHLD)) {
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(SIGCHLD, &dfl, NULL);
    }
    /* Everything blocked across fork: the child must not run our handlers
     * before it resets them, and the parent sets the forwarding target
     * before any forwarded signal can be handled. */
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    pid = fork();
    if (pid == 0)
        run_child(argv, envp, fds[1], die, self);
    err = errno;
    if (pid > 0)
        target_pid = (sig_atomic_t)pid;
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(fds[1]);
    if (pid > 0) {
        /* exec closes the pipe (CLOEXEC): 0 bytes means it ran */
        do
            n = read(fds[0], &child_err, sizeof child_err);
        while (n < 0 && errno == EINTR);
        if (n == (ssize_t)sizeof child_err) {
            reap(pid);
            err = child_err;
            pid = -1;
        }
    }
    close(fds[0]);
    free(argv);
    free_env(envp, nadd);
    if (pid < 0)
        return push_spawn_error(L, cmd, err, child_err != 0);
    lua_pushinteger(L, (lua_Integer)pid);
    return 1;
}

static void sleep_ms(double ms) {
    struct timespec ts;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1000) * 1e6);
    nanosleep(&ts, NULL); /* a signal may cut it short: the caller loops */
}

/* wait(pid [, ms]): polls with WNOHANG, sleeping 1, 2, 4 ... up to 20 ms
 * between polls, so a child that ends is seen within 20 ms. */
static int proc_wait(lua_State *L) {
    lua_Integer pid = luaL_checkinteger(L, 1);
    lua_Number ms = luaL_optnumber(L, 2, 0);
    double deadline, step = 1, left;
    sigset_t set, old;
    int status = 0, err;
    pid_t r;
    luaL_argcheck(L, pid > 0, 1, "positive pid expected");
    if (!(ms > 0))
        ms = 0;
    if (ms > 86400000)
        ms = 86400000;
    deadline = redlock_mono_ms() + ms;
    forwarded_set(&set);
    for (;;) {
        /* blocked so no signal goes to the pid after it is reaped (and maybe
         * reused by another process) */
        sigprocmask(SIG_BLOCK, &set, &old);
        r = waitpid((pid_t)pid, &status, WNOHANG);
        err = errno;
        if (r == (pid_t)pid && target_pid == (sig_atomic_t)pid)
            target_pid = 0;
        sigprocmask(SIG_SETMASK, &old, NULL);
        if (r == (pid_t)pid) {
            if (WIFEXITED(status)) {
                lua_pushliteral(L, "exit");
                lua_pushinteger(L, WEXITSTATUS(status));
                return 2;
            }
            if (WIFSIGNALED(status)) {
                lua_pushliteral(L, "signal");
                lua_pushinteger(L, WTERMSIG(status));
                return 2;
            }
            continue; /* stopped or continued: still running */
        }
        if (r < 0 && err != EINTR) {
            lua_pushnil(L);
            lua_pushfstring(L, "cannot wait for process %d: %s", (int)pid, strerror(err));
            return 2;
        }
        left = deadline - redlock_mono_ms();
        if (left <= 0) {
            lua_pushboolean(L, 0);
            return 1;
        }
        sleep_ms(step < left ? step : left);
        if (step < 20)
            step *= 2;
    }
}

static int check_signal(lua_State *L, int idx) {
    const char *name;
    int i;
    if (lua_type(L, idx) == LUA_TNUMBER) {
        lua_Integer sig = luaL_checkinteger(L, idx);
        luaL_argcheck(L, sig >= 0 && sig < 65, idx, "signal number out of range");
        return (int)sig;
    }
    name = luaL_checkstring(L, idx);
    if (strncmp(name, "SIG", 3) == 0)
        name += 3;
    for (i = 0; signal_names[i].name != NULL; i++)
        if (strcmp(signal_names[i].name, name) == 0)
            return signal_names[i].sig;
    return luaL_argerror(L, idx, "unknown signal name");
}

/* kill(pid, sig) -> true | nil, msg */
static int proc_kill(lua_State *L) {
    lua_Integer pid = luaL_checkinteger(L, 1);
    int sig = check_signal(L, 2);
    luaL_argcheck(L, pid > 0, 1, "positive pid expected");
    if (kill((pid_t)pid, sig) != 0) {
        int err = errno;
        lua_pushnil(L);
        lua_pushfstring(L, "cannot signal process %d: %s", (int)pid, strerror(err));
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

void redlock_proc_open(lua_State *L) {
    static const luaL_Reg funcs[] = {
        {"trap", proc_trap},   {"caught", proc_caught}, {"spawn", proc_spawn},
        {"wait", proc_wait},   {"kill", proc_kill},     {NULL, NULL},
    };
    int i;
    luaL_newlib(L, funcs);
    lua_newtable(L);
    for (i = 0; signal_names[i].name != NULL; i++) {
        lua_pushinteger(L, signal_names[i].sig);
        lua_setfield(L, -2, signal_names[i].name);
    }
    lua_setfield(L, -2, "signals");
    lua_pushboolean(L, CAN_DIE_WITH_PARENT);
    lua_setfield(L, -2, "can_die_with_parent");
    lua_setfield(L, -2, "proc");
}
