-- Spends an authorization code (src/signin/codes.ts). KEYS[1]: the code's record.
-- A code is good once: the first call marks it used and returns its fields ({'ok', f1, v1, ...});
-- a later one gets {'used', <the token issued from it, or ''>} so that token can be revoked
-- (RFC 6749 §4.1.2); an unknown or expired code {'unknown'}. The record keeps its TTL either way.
local fields = redis.call('HGETALL', KEYS[1])
if #fields == 0 then return {'unknown'} end
local used = redis.call('HGET', KEYS[1], 'used')
if used then return {'used', used} end
redis.call('HSET', KEYS[1], 'used', '')
table.insert(fields, 1, 'ok')
return fields
