-- The uncontended cycle with notify = false against the textbook floor.
return dofile("bench/textbook.lua") {
    id = "tb_nonotify",
    title = "notify = false vs textbook",
    opts = { notify = false },
    commands = { set = 1, xadd = 1, evalsha = 1, get = 1, exists = 1, del = 1 },
    sent = { "set", "xadd" },
}
