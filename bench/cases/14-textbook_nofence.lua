-- The uncontended cycle with fence = false against the textbook floor.
return dofile("bench/textbook.lua") {
    id = "tb_nofence",
    title = "fence = false vs textbook",
    opts = { fence = false },
    commands = { evalsha = 2, get = 2, set = 1, del = 1, exists = 1 },
}
