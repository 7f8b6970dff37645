-- The uncontended cycle with the defaults (fence, notified waiting) against
-- the textbook floor (bench/textbook.lua).
return dofile("bench/textbook.lua") {
    id = "textbook",
    title = "acquire+release vs textbook",
    commands = { evalsha = 2, get = 2, set = 1, incr = 1, time = 1, del = 1, exists = 1 },
    occasional = { set = 1 }, -- the fence counter raised to the clock
}
