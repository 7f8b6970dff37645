#ifndef REDLOCK_DEFAULTS_H
#define REDLOCK_DEFAULTS_H

/* The defaults of every host and path, defined here once: the C core uses
 * them directly, Lua reads them as core.defaults (lua/redlock/options.lua,
 * the cosocket transport). ms unless said otherwise. */
#define REDLOCK_DEFAULT_CONNECT_TIMEOUT 1000 /* connect, handshake, AUTH */
#define REDLOCK_DEFAULT_TIMEOUT 1000         /* a reply; also a redirection loop's limit */
#define REDLOCK_DEFAULT_KEEPALIVE 60000      /* an idle pooled cosocket */
#define REDLOCK_DEFAULT_POOL_SIZE 32         /* idle cosockets kept per server */
#define REDLOCK_DEFAULT_SENTINEL_CAP 500     /* a sentinel's connect and reply limit */
#define REDLOCK_DEFAULT_SENTINEL_CHECK 1000  /* how often the sentinels are asked again */
#define REDLOCK_DEFAULT_SERVER_TIMEOUT 50    /* a Redlock voter's limit (the renewal's) */
#define REDLOCK_DEFAULT_REPLICA_TIMEOUT 1000 /* WAIT's */

/* Pushes a table of the defaults above (core.defaults). */
struct lua_State;
void redlock_defaults_push(struct lua_State *L);

#endif
