-- The uncontended cycle with fence = false and notify = false against the
-- textbook floor.
return dofile("bench/textbook.lua") {
    id = "tb_plain",
    title = "fence, notify = false vs textbook",
    opts = { fence = false, notify = false },
    commands = { evalsha = 2, get = 2, set = 1, del = 1, exists = 1 },
}
