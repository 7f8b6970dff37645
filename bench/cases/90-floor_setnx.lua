-- Not the library: SET NX PX + EVALSHA of the library's release (no fence
-- counter) against the fair floor (SET NX PX and XADD in one write +
-- EVALSHA release), both in C. Shows what the fence's XADD costs.
return {
    id = "floor_setnx",
    title = "C: SET NX PX + EVALSHA release",
    floor = "cycle",
    floor_b = "setnx",
    iterations = 1000,
    round_trips = 2,
    commands = { set = 1, evalsha = 1, get = 1, del = 1 },
    -- sent by the client besides the script (time inside commands)
    sent = { "set" },
    floor_commands = { set = 1, xadd = 1, evalsha = 1, get = 1, del = 1 },
    floor_sent = { "set", "xadd" },
}
