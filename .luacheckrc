-- plain output: the tools that read it are not terminals
color = false
std = "max"
max_line_length = 110
files["spec"] = { std = "+busted", max_line_length = 130 }
exclude_files = { "build", ".luarocks" }
-- code that runs inside nginx's Lua module
files["spec/openresty"] = { std = "+ngx_lua" }
files["examples/openresty"] = { std = "+ngx_lua" }
files["bench/openresty"] = { std = "+ngx_lua" }
-- the Redis scripts (scripts/*.lua, embedded by tools/embed.lua): Lua 5.1
-- inside Redis, with its globals; `fence` and `seeded` come from
-- scripts/_fence.lua, included where a script says "--! include _fence.lua"
stds.redis = { read_globals = { "KEYS", "ARGV", "redis", "cjson", "cmsgpack", "bit", "struct" } }
files["scripts"] = { std = "lua51+redis", read_globals = { "fence", "seeded" } }
files["scripts/_fence.lua"] = { std = "lua51+redis", ignore = { "211" } } -- used by the includers
