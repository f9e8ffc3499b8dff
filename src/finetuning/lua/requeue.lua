-- Marks a running fine-tuning job queued again after its trainer died (src/finetuning/trainers.ts),
-- unless a trainer took it since: its `taken_at` then differs from the one read before.
-- KEYS[1]: the job's hash. ARGV[1]: the taken_at read ("" for none). Returns 1 when written.
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return 0 end
if (redis.call('HGET', KEYS[1], 'taken_at') or '') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'status', 'queued')
return 1
