rockspec_format = "3.0"
package = "redlock"
version = "scm-1"
source = {
   url = "git+file:///dev/null", -- built from this tree with `luarocks make`
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
   type = "builtin",
   modules = {
      redlock = "lua/redlock.lua",
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
      ["redlock.options"] = "lua/redlock/options.lua",
      ["redlock.cosocket"] = "lua/redlock/cosocket.lua",
      ["redlock.ngx_sentinel"] = "lua/redlock/ngx_sentinel.lua",
      ["redlock.ngx_pubsub"] = "lua/redlock/ngx_pubsub.lua",
      ["redlock.ngx_wait"] = "lua/redlock/ngx_wait.lua",
      ["redlock.ngx_cluster"] = "lua/redlock/ngx_cluster.lua",
      ["redlock.ngx_conn"] = "lua/redlock/ngx_conn.lua",
      ["redlock.quorum"] = "lua/redlock/quorum.lua",
      ["redlock.replicas"] = "lua/redlock/replicas.lua",
      ["redlock.scripted"] = "lua/redlock/scripted.lua",
      ["redlock.semaphore"] = "lua/redlock/semaphore.lua",
      ["redlock.server"] = "lua/redlock/server.lua",
      ["redlock.shared"] = "lua/redlock/shared.lua",
      ["redlock.single"] = "lua/redlock/single.lua",
      ["redlock.util"] = "lua/redlock/util.lua",
      ["redlock.core"] = {
         sources = {
            "csrc/clock.c",
            "csrc/cluster.c",
            "csrc/conn.c",
            "csrc/conn_io.c",
            "csrc/conn_lua.c",
            "csrc/conn_opts.c",
            "csrc/core.c",
            "csrc/defaults.c",
            "csrc/fanout.c",
            "csrc/fanout_lua.c",
            "csrc/proc.c",
            "csrc/proto.c",
            "csrc/renew.c",
            "csrc/renew_io.c",
            "csrc/renew_lua.c",
            "csrc/renew_quorum.c",
            "csrc/reply.c",
            "csrc/resp.c",
            "csrc/script.c",
            "csrc/sha1.c",
            "csrc/sentinel.c",
            "csrc/slot.c",
            "csrc/tls.c",
            "csrc/token.c",
            "csrc/topo.c",
            "csrc/topo_lua.c",
            "csrc/wait.c",
         },
         incdirs = { "$(HIREDIS_INCDIR)", "$(OPENSSL_INCDIR)" },
         libdirs = { "$(HIREDIS_LIBDIR)", "$(OPENSSL_LIBDIR)" },
         -- pthread: the renewal thread (csrc/renew.c); ssl, crypto: TLS (csrc/tls.c)
         libraries = { "hiredis", "ssl", "crypto", "pthread" },
      },
   },
   install = {
      bin = { redlock = "bin/redlock" },
   },
}
