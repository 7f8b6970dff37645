--- A seeded random stream, the same in every Lua (5.1 to 5.4, LuaJIT):
-- Park and Miller's minimal standard generator (x * 48271 mod 2^31 - 1),
-- exact in doubles and in 5.4's integers alike. The torture run draws
-- every choice from streams derived from its one seed.
local floor = math.floor

local _M = {}

local MOD, MUL = 2147483647, 48271

local Rng = {}
Rng.__index = Rng

--- A stream from seed (any number); stream n of a seed: new(seed, n).
function _M.new(seed, n)
    local s = (floor(seed) * 7919 + floor(n or 0) * 104729 + 12345) % MOD
    if s <= 0 then s = s + 1 end
    local self = setmetatable({ s = s }, Rng)
    for _ = 1, 3 do self:next() end
    return self
end

function Rng:next()
    self.s = (self.s * MUL) % MOD
    return self.s
end

--- An integer from a to b, both included.
function Rng:int(a, b) return a + (self:next() - 1) % (b - a + 1) end

--- A float in [0, 1).
function Rng:float() return (self:next() - 1) / (MOD - 1) end

--- true with probability p.
function Rng:chance(p) return self:float() < p end

--- One element of a list.
function Rng:pick(list) return list[self:int(1, #list)] end

--- A name from { name = weight, ... } (names in sorted order, so the draw
-- is the same whatever the table's iteration order).
function Rng:weighted(weights)
    local names, total = {}, 0
    for name, w in pairs(weights) do
        if w > 0 then
            names[#names + 1] = name
            total = total + w
        end
    end
    table.sort(names)
    local x = self:float() * total
    for _, name in ipairs(names) do
        x = x - weights[name]
        if x < 0 then return name end
    end
    return names[#names]
end

return _M
