-- Several OS processes contending for one lock lose no update.
local helper = require "helper"
local core = require "redlock.core"

describe("contention between processes", function()
    local server
    setup(function() server = helper.start_server() end)
    teardown(function() helper.stop_all() end)

    it("4 processes x 100 read-modify-write cycles under the lock lose no update", function()
        local lock_key, counter_key = helper.key("lock"), helper.key("counter")
        local workers = {}
        for i = 1, 4 do
            workers[i] = helper.spawn("spec/workers/counter.lua", server:url(), lock_key, counter_key, 100)
        end
        for i = 1, 4 do
            local status, out = workers[i]:wait(120000)
            assert.equal(0, status, out)
            assert.matches("done 100", out)
        end
        local data = core.conn(server:spec())
        assert.equal("400", data:command("GET", counter_key))
        assert.equal(0, data:command("EXISTS", lock_key))
        data:close()
    end)
end)
