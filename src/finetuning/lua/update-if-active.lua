-- Writes a fine-tuning job's fields unless it has ended (src/finetuning/store.ts): a trainer that
-- lost its job, or lags behind a cancel, must not bring an ended job back.
-- KEYS[1]: the job's hash. ARGV: field, value, ... Returns 1 when written.
local s = redis.call('HGET', KEYS[1], 'status')
if not s or s == 'succeeded' or s == 'failed' or s == 'cancelled' then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
