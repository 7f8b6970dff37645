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
