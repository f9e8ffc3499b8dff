-- Stores the operator's bootstrap admin key, once across gateways (src/keys/store.ts).
-- KEYS: the hash → id index, the records hash, the bootstrap key's hash. ARGV: the key's hash, the
-- new record's id, the new record. Returns {'exists', id} (this key is already stored),
-- {'conflict', id} (another bootstrap key still valid) or {'created', id}.
local id = redis.call('HGET', KEYS[1], ARGV[1])
if id then redis.call('SET', KEYS[3], ARGV[1]); return {'exists', id} end
local cur = redis.call('GET', KEYS[3])
if cur and cur ~= ARGV[1] then
  local other = redis.call('HGET', KEYS[1], cur)
  if other and redis.call('HEXISTS', KEYS[2], other) == 1 then return {'conflict', other} end
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('SET', KEYS[3], ARGV[1])
return {'created', ARGV[2]}
