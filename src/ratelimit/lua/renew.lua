-- Concurrency leases moved forward while their requests live (src/ratelimit/limiter.ts).
--
-- KEYS[1]: a slots set. ARGV: lease ms, then the members still in flight: their leases move to
-- now + lease (only those still there).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ = now + tonumber(ARGV[1])
for j = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', until_, ARGV[j]) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]))
return 1
