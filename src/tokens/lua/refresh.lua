-- Trades a refresh token for a new access and refresh token, once (src/tokens/store.ts). KEYS: the
-- presented refresh token's key, the session hash, the session's current access token's key, the new
-- access token's key, the new refresh token's key. ARGV: the session id, the presented refresh
-- token's hash, the current access token's hash (as read before), the new access and refresh
-- hashes, now (epoch ms), the access tokens' lifetime (ms).
-- Returns {'ok', expires}, {'reused'} for a refresh token already traded (the caller revokes the
-- session: one of its two holders is not its owner), {'expired'} or {'unknown'}.
local id = ARGV[1]
local presented = redis.call('GET', KEYS[1])
if not presented then return {'unknown'} end
if presented == 'used:' .. id then return {'reused'} end
if presented ~= id then return {'unknown'} end
local s = redis.call('HMGET', KEYS[2], 'refresh', 'access', 'ends')
if s[1] ~= ARGV[2] or s[2] ~= ARGV[3] then return {'unknown'} end
local now, ends = tonumber(ARGV[6]), tonumber(s[3])
if ends <= now then return {'expired'} end
local expires = math.min(now + tonumber(ARGV[7]), ends)
redis.call('DEL', KEYS[3])
-- Kept until the session ends, so a second use is recognised as reuse rather than as unknown.
redis.call('SET', KEYS[1], 'used:' .. id, 'PX', ends - now)
redis.call('SET', KEYS[4], id, 'PX', expires - now)
redis.call('SET', KEYS[5], id, 'PX', ends - now)
redis.call('HSET', KEYS[2], 'access', ARGV[4], 'refresh', ARGV[5], 'expires', expires)
redis.call('HINCRBY', KEYS[2], 'refreshed', 1)
return {'ok', tostring(expires)}
