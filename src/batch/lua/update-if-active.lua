-- Writes a batch job's fields unless it has finished (src/batch/store.ts): writes from a
-- coordinator that lost its job (or lags behind a cancel) must not resurrect a finished job.
-- KEYS[1]: the job's hash. ARGV: field, value, ... Returns 1 when written.
local s = redis.call('HGET', KEYS[1], 'state')
if not s or s == 'completed' or s == 'failed' or s == 'cancelled' then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
