-- The uncontended cycle with fence = false and notify = false against the
-- textbook floor.
return dofile("bench/textbook.lua") {
    id = "tb_plain",
    title = "fence, notify = false vs textbook",
    opts = { fence = false, notify = false },
    commands = { set = 1, evalsha = 1, get = 1, exists = 1, del = 1 },
    sent = { "set" },
}
