rockspec_format = "3.0"
package = "redlock"
version = "0.1.0-1"
source = {
   -- the archive of the tree that `make dist` writes and packs with this
   -- file into redlock-0.1.0-1.src.rock: installing that rock fetches nothing
   url = "redlock-0.1.0.tar.gz",
   dir = "redlock-0.1.0",
}
description = {
   summary = "Redis distributed locks for Lua, with a C core on hiredis (and OpenSSL for TLS)",
   detailed = [[
Single-instance locks and Redlock across several Redis masters: acquire,
try_acquire, extend, release and with_lock, token-checked atomic scripts,
fencing tokens, and a SETNX/GETSET fallback for servers without scripting.
]],
   license = "MIT",
   homepage = "https://example.invalid/redlock",
}
dependencies = {
   "lua >= 5.1",
}
external_dependencies = {
   HIREDIS = {
      header = "hiredis/hiredis.h",
      library = "hiredis",
   },
   OPENSSL = {
      header = "openssl/ssl.h",
      library = "ssl",
   },
}
build = {
   -- The Makefile builds the core (the C files of csrc/, with the Redis
   -- scripts of scripts/, which tools/embed.sh embeds at build time: a
   -- builtin build cannot run it); the rest is copied. No -Werror here: a newer
   -- compiler's new warning must not stop an install.
   type = "make",
   build_target = "build/rock/redlock/core.so",
   build_variables = {
      BUILD = "build/rock",
      CFLAGS = "$(CFLAGS) -I$(HIREDIS_INCDIR) -I$(OPENSSL_INCDIR)",
      WARN = "-std=c99",
      LUA_CFLAGS = "-I$(LUA_INCDIR)",
      -- ssl, crypto: TLS (csrc/connection/tls.c); the Makefile adds -pthread (the
      -- renewal thread, csrc/drivers/renew.c)
      HIREDIS_LIBS = "-L$(HIREDIS_LIBDIR) -lhiredis",
      SSL_LIBS = "-L$(OPENSSL_LIBDIR) -lssl -lcrypto",
   },
   install_pass = false,
   install = {
      lua = {
         redlock = "lua/redlock.lua",
         ["redlock.acquire"] = "lua/redlock/acquire.lua",
         ["redlock.cli"] = "lua/redlock/cli.lua",
         ["redlock.cli.args"] = "lua/redlock/cli/args.lua",
         ["redlock.cli.codes"] = "lua/redlock/cli/codes.lua",
         ["redlock.cli.run"] = "lua/redlock/cli/run.lua",
         ["redlock.detect"] = "lua/redlock/detect.lua",
         ["redlock.events"] = "lua/redlock/events.lua",
         ["redlock.group"] = "lua/redlock/group.lua",
         ["redlock.eviction"] = "lua/redlock/eviction.lua",
         ["redlock.hold"] = "lua/redlock/hold.lua",
         ["redlock.legacy"] = "lua/redlock/legacy.lua",
         ["redlock.notify"] = "lua/redlock/notify.lua",
         ["redlock.ops"] = "lua/redlock/ops.lua",
         ["redlock.options"] = "lua/redlock/options.lua",
         ["redlock.addresses"] = "lua/redlock/addresses.lua",
         ["redlock.cosocket"] = "lua/redlock/cosocket.lua",
         ["redlock.nginx.cosocket"] = "lua/redlock/nginx/cosocket.lua",
         ["redlock.nginx.sentinel"] = "lua/redlock/nginx/sentinel.lua",
         ["redlock.nginx.pubsub"] = "lua/redlock/nginx/pubsub.lua",
         ["redlock.nginx.wait"] = "lua/redlock/nginx/wait.lua",
         ["redlock.nginx.cluster"] = "lua/redlock/nginx/cluster.lua",
         ["redlock.nginx.conn"] = "lua/redlock/nginx/conn.lua",
         ["redlock.quorum"] = "lua/redlock/quorum.lua",
         ["redlock.replicas"] = "lua/redlock/replicas.lua",
         ["redlock.scripted"] = "lua/redlock/scripted.lua",
         ["redlock.semaphore"] = "lua/redlock/semaphore.lua",
         ["redlock.server"] = "lua/redlock/server.lua",
         ["redlock.shared"] = "lua/redlock/shared.lua",
         ["redlock.single"] = "lua/redlock/single.lua",
         ["redlock.util"] = "lua/redlock/util.lua",
      },
      lib = { ["redlock.core"] = "build/rock/redlock/core.so" },
      bin = { redlock = "bin/redlock" },
   },
}
