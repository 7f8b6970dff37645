-- The uncontended cycle with notify = false against the textbook floor.
return dofile("bench/textbook.lua") {
    id = "tb_nonotify",
    title = "notify = false vs textbook",
    opts = { notify = false },
    commands = { evalsha = 2, get = 2, set = 1, incr = 1, time = 1, del = 1, exists = 1 },
    occasional = { set = 1 },
}
