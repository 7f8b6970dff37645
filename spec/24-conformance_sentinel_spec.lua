-- Conformance of the topology rules: the sentinel cases (spec/conformance_cases.lua,
-- loaded in this file's environment: busted's describe, it and assert).
local cases = assert(loadfile("spec/conformance_cases.lua", "t", _ENV))
if setfenv then setfenv(cases, getfenv(1)) end
cases()("sentinel")
