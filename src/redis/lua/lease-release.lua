-- Gives the scaler's lease up (src/redis/lease.ts) if the caller still holds it.
-- KEYS[1]: the lease. ARGV[1]: the holder's token. Returns 1 when deleted, else 0.
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
