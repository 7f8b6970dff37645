-- Not the library: the fair floor with tokens from getrandom(2), one system
-- call per token as the library makes them, against the fair floor with
-- counter tokens. Shows, in the same run, how much of the library's gap to
-- the floor is that system call.
return {
    id = "floor_random",
    title = "C: cycle with getrandom tokens",
    floor = "cycle",
    floor_b = "-r cycle",
    iterations = 1000,
    round_trips = 2,
    commands = { set = 1, xadd = 1, evalsha = 1, get = 1, del = 1 },
    sent = { "set", "xadd" },
    floor_sent = { "set", "xadd" },
}
