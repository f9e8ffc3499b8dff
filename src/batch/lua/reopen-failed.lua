-- Puts a failed batch job back in the queue (src/batch/store.ts); what it wrote and its
-- checkpoint stay. KEYS[1]: the job's hash. Returns 1 when reopened, 0 when it is not failed.
if redis.call('HGET', KEYS[1], 'state') ~= 'failed' then return 0 end
redis.call('HSET', KEYS[1], 'state', 'queued')
redis.call('HDEL', KEYS[1], 'error', 'finished', 'partial', 'resumable', 'cancel_requested')
return 1
