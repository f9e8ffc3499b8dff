-- What a grant did not use, given back (src/ratelimit/allowances.ts, through the limiter).
--
-- KEYS: per scope its `w`, `t` and `s`. ARGV: the number n of requests, those n members, then
-- slots. Each request leaves the log and its tokens the sum.
-- Nothing is written to a key that has expired meanwhile (it would live forever).
local n = tonumber(ARGV[1])
for i = 0, #KEYS / 3 - 1 do
  local w, tk, s = KEYS[3 * i + 1], KEYS[3 * i + 2], KEYS[3 * i + 3]
  if n > 0 then
    redis.call('ZREM', w, unpack(ARGV, 2, n + 1))
    local got = redis.call('HMGET', tk, 'sum', unpack(ARGV, 2, n + 1))
    if got[1] then
      local freed = 0
      for k = 2, #got do if got[k] then freed = freed + tonumber(got[k]) end end
      redis.call('HDEL', tk, unpack(ARGV, 2, n + 1))
      redis.call('HSET', tk, 'sum', tonumber(got[1]) - freed)
    end
  end
  if #ARGV > n + 1 then redis.call('ZREM', s, unpack(ARGV, n + 2, #ARGV)) end
end
return 1
