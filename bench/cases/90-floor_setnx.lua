-- Not the library: the textbook floor (SET NX PX + EVALSHA release, no fence
-- counter) against the fair floor (EVALSHA acquire + EVALSHA release), both
-- in C. Shows what the atomic acquire script with its fence costs on the
-- server, which no client-side work can win back.
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
    floor_commands = { evalsha = 2, get = 2, set = 1, incr = 1, time = 1, del = 1 },
    occasional = { set = 1 },
}
