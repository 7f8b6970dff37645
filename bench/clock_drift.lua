-- What Redlock's drift allowance covers (docs/guarantees.md#clocks): a
-- lock server whose clock runs fast by a rate r (libfaketime's "x r", on a
-- libc-malloc build of ../shared/servers), a 5 s lock (drift_factor 0.01):
-- how many ms after the client's validity ended the key died (negative:
-- before it, when a second holder could take it). Three locks per rate.
-- usage, from the top of the tree after `make`:
--   lua5.4 bench/clock_drift.lua [servers dir, default ../shared/servers]
package.path = "spec/?.lua;lua/?.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local helper = require "helper"
local redlock = require "redlock"
local core = require "redlock.core"

local lib = helper.read_cmd("ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null"):match("%S+")
local bin = helper.read_cmd("cd " .. helper.quote(arg[1] or "../shared/servers") .. " 2>/dev/null && pwd")
    :gsub("%s+$", "") .. "/redis-7.4.1/redis-server"
assert(lib, "no libfaketime (Debian's faketime)")
assert(io.open(bin), "no " .. bin)

local ok, err = pcall(function()
    for _, rate in ipairs({ "1.005", "1.009", "1.012", "1.02", "1.05" }) do
        local dir = helper.fresh_dir("rate")
        local f = assert(io.open(dir .. "/redis-server", "w"))
        f:write("#!/bin/sh\nexec env LD_PRELOAD=", lib, " FAKETIME='+0 x", rate, "' ", bin, ' "$@"\n')
        f:close()
        assert(os.execute("chmod +x " .. dir .. "/redis-server"))
        local server = helper.start_server { exec = "env PATH=" .. dir .. ":$PATH " }
        local client = redlock.new { servers = { server:url() } }
        local data = core.conn(server:spec())
        local margins = {}
        for i = 1, 3 do
            local key = "drift:" .. i
            local lock = assert(client:acquire(key, { ttl = 5000 }))
            local valid_until = core.now() + lock:remaining()
            while data:command("EXISTS", key) == 1 do core.sleep(1) end
            margins[i] = string.format("%.0f", core.now() - valid_until)
        end
        print(string.format("server clock x%s: the key died %s ms after the validity ended", rate,
            table.concat(margins, ", ")))
        client:close()
        data:close()
        server:stop()
    end
end)
helper.stop_all()
os.execute("rm -rf " .. helper.quote(helper.root()))
assert(ok, err)
