-- Extends the scaler's lease (src/redis/lease.ts) if the caller still holds it.
-- KEYS[1]: the lease. ARGV: the holder's token, the TTL in ms. Returns PEXPIRE's answer, or 0.
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
