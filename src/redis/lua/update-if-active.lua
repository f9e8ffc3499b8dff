-- Writes a job's fields unless it has ended (src/redis/stored.ts `updateIfActive`: batch and
-- fine-tuning jobs): a worker that lost its job, or lags behind a cancel, must not bring an ended
-- job back.
-- KEYS[1]: the job's hash. ARGV: the state field, the number n of final states, the n final
-- states, then field, value, ... Returns 1 when written.
local s = redis.call('HGET', KEYS[1], ARGV[1])
if not s then return 0 end
local n = tonumber(ARGV[2])
for i = 3, 2 + n do
  if s == ARGV[i] then return 0 end
end
redis.call('HSET', KEYS[1], unpack(ARGV, 3 + n))
return 1
