-- The uncontended cycle with the defaults (fence, notified waiting) against
-- the textbook floor (bench/textbook.lua).
return dofile("bench/textbook.lua") {
    id = "textbook",
    title = "acquire+release vs textbook",
    headline = true, -- its targets are in the README's table
    commands = { set = 1, xadd = 1, evalsha = 1, get = 1, exists = 1, del = 1 },
    sent = { "set", "xadd" },
}
