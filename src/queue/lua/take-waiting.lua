-- Takes a waiting job out of a queue's reach (src/queue/lanes.ts, moveWaiting): out of its wait list
-- or its prioritized set, so no worker can take it from then on. KEYS[1]: the wait list,
-- KEYS[2]: the prioritized set. ARGV[1]: the job id. Returns 1 when it was waiting there, 0 when not
-- (taken meanwhile, finished, or gone), so the caller moves a job exactly once.
if redis.call('LREM', KEYS[1], 0, ARGV[1]) > 0 then return 1 end
return redis.call('ZREM', KEYS[2], ARGV[1])
