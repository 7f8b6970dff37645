std = "max"
max_line_length = 110
files["spec"] = { std = "+busted", max_line_length = 130 }
exclude_files = { "build", ".luarocks" }
