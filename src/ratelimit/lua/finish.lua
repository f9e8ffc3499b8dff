-- A request's end: its slot released and its tokens settled (src/ratelimit/limiter.ts).
--
-- KEYS: per scope its `w`, `t` and `s`. ARGV: member, actual tokens ("" keeps the reservation),
-- "1" to release a slot, and the slot (the member's own when absent).
-- Settling only changes an entry still in the window: one that has left it counts no more anyway.
local slot = ARGV[4] or ARGV[1]
for i = 0, #KEYS / 3 - 1 do
  local tk, s = KEYS[3 * i + 2], KEYS[3 * i + 3]
  if ARGV[3] == '1' then redis.call('ZREM', s, slot) end
  if ARGV[2] ~= '' then
    local got = redis.call('HMGET', tk, ARGV[1], 'sum')
    if got[1] then
      local actual = tonumber(ARGV[2])
      redis.call('HSET', tk, ARGV[1], actual, 'sum', tonumber(got[2] or '0') + actual - tonumber(got[1]))
    end
  end
end
return 1
