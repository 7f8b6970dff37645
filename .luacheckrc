-- plain output: the tools that read it are not terminals
color = false
std = "max"
max_line_length = 110
files["spec"] = { std = "+busted", max_line_length = 130 }
files["torture"] = { max_line_length = 130 }
exclude_files = { ".luarocks" }
-- the Redis scripts as tools/embed.sh composes them from scripts/NAME.lua
-- into build/gen/scripts/ (make lint): Lua 5.1 with Redis' globals, and
-- no global of their own (Redis refuses them)
stds.redis = { read_globals = { "redis", "KEYS", "ARGV", "cjson", "cmsgpack", "bit", "struct" } }
files["**/gen/scripts"] = { std = "lua51+redis" }
-- code that runs inside nginx's Lua module
files["spec/openresty"] = { std = "+ngx_lua" }
files["examples/openresty"] = { std = "+ngx_lua" }
files["bench/openresty"] = { std = "+ngx_lua" }
files["torture/ngx_hold.lua"] = { std = "+ngx_lua", max_line_length = 130 }
