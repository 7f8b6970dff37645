-- The uncontended cycle with fence = false against the textbook floor.
return dofile("bench/textbook.lua") {
    id = "tb_nofence",
    title = "fence = false vs textbook",
    opts = { fence = false },
    commands = { set = 1, evalsha = 1, get = 1, exists = 1, del = 1 },
    sent = { "set" },
}
