-- Prints n tokens, one a line: for the spec that checks tokens never repeat
-- across processes started at the same moment.
local redlock = require "redlock"
for _ = 1, tonumber(arg[1]) do print(redlock.token()) end
