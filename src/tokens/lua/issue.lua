-- Stores a new token session (src/tokens/store.ts). KEYS: the session hash, its access token's key,
-- its refresh token's key, the organization's and the subject's index. ARGV: the session id, now,
-- the access token's expiry and the session's end (epoch ms), then the session's field/value pairs.
-- Every key expires with what it describes; each index drops ended sessions and lives as long as
-- its last one, so nothing grows without bound.
local id, now, expires, ends = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local fields = {}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIREAT', KEYS[1], ends)
redis.call('SET', KEYS[2], id, 'PX', expires - now)
redis.call('SET', KEYS[3], id, 'PX', ends - now)
for i = 4, 5 do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  redis.call('ZADD', KEYS[i], ends, id)
  local last = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[i], last[2])
end
return 1
