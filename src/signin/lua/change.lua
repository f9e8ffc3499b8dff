-- Changes a live browser flow (src/signin/flows.ts); one that ended meanwhile is not brought back,
-- and the flow keeps its own expiry. KEYS[1]: the flow. ARGV[1]: a field to add one to ('' for
-- none), ARGV[2]: how many fields to set (n), then n field/value pairs, then the fields to clear.
-- Returns the incremented count (0 when none was asked for), or -1 when the flow is gone.
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local last = 2 + 2 * tonumber(ARGV[2])
if last > 2 then redis.call('HSET', KEYS[1], unpack(ARGV, 3, last)) end
if #ARGV > last then redis.call('HDEL', KEYS[1], unpack(ARGV, last + 1)) end
if ARGV[1] ~= '' then return redis.call('HINCRBY', KEYS[1], ARGV[1], 1) end
return 0
