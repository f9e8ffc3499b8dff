-- Approves or denies a device code from the browser (src/signin/devices.ts). KEYS[1]: the device
-- record, KEYS[2]: its user code's key. ARGV: now (epoch ms), the status, then field/value pairs.
-- Only a pending, unexpired code is decided, and once: its user code is dropped, so it cannot be
-- entered again. Returns 1 when decided, 0 otherwise.
local h = redis.call('HMGET', KEYS[1], 'status', 'expires')
if h[1] ~= 'pending' or tonumber(ARGV[1]) >= tonumber(h[2]) then return 0 end
local fields = {'status', ARGV[2]}
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('DEL', KEYS[2])
return 1
