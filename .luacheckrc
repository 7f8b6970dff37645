std = "max"
max_line_length = 110
files["spec"] = { std = "+busted" }
exclude_files = { "build", ".luarocks" }
