-- Replaces a hash field's stored record only if it is still the one read (src/redis/stored.ts).
-- KEYS[1]: the hash. ARGV: the field, the record read, the new record. Returns 1 when swapped,
-- 0 when the record changed (or went) meanwhile.
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]); return 1 end
return 0
