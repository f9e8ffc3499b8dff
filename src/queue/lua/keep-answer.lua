-- Keeps a batch record's answer on its job (src/queue/kept-answers.ts).
-- KEYS[1]: the job's hash. ARGV: the field, the answer.
-- Only onto a job that still exists: one removed meanwhile (its batch cancelled) must not come
-- back as a stray hash holding an answer.
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
