-- Stores one response of an organization and keeps the organization within its bounds (store.ts).
-- KEYS: the index (zset id -> expiry ms), the sizes (hash id -> bytes), the record.
-- ARGV: id, record JSON, TTL ms, now ms, most records, most bytes, the records' key prefix.
-- Answers 1 when stored, 0 when the record alone is over the bytes bound (nothing changes).
local index, sizes, record = KEYS[1], KEYS[2], KEYS[3]
local id, json = ARGV[1], ARGV[2]
local ttl, now = tonumber(ARGV[3]), tonumber(ARGV[4])
local maxCount, maxBytes, prefix = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local size = string.len(json)
if size > maxBytes then return 0 end
-- A record that expired on its own left its index entry and size behind.
for _, old in ipairs(redis.call('ZRANGEBYSCORE', index, '-inf', now)) do redis.call('HDEL', sizes, old) end
redis.call('ZREMRANGEBYSCORE', index, '-inf', now)
redis.call('SET', record, json, 'PX', ttl)
redis.call('ZADD', index, now + ttl, id)
redis.call('HSET', sizes, id, size)
local total = 0
for _, v in ipairs(redis.call('HVALS', sizes)) do total = total + tonumber(v) end
-- Every record lives as long, so the soonest to expire is the oldest: it goes first.
while redis.call('ZCARD', index) > maxCount or total > maxBytes do
  local oldest = redis.call('ZRANGE', index, 0, 0)[1]
  total = total - tonumber(redis.call('HGET', sizes, oldest) or '0')
  redis.call('ZREM', index, oldest)
  redis.call('HDEL', sizes, oldest)
  redis.call('DEL', prefix .. oldest)
end
redis.call('PEXPIRE', index, ttl)
redis.call('PEXPIRE', sizes, ttl)
return 1
