-- One poll of a device code (src/signin/devices.ts, RFC 8628 §3.5). KEYS[1]: the device record.
-- ARGV: now (epoch ms), how much a poll that came too early adds to the interval (ms).
-- Returns {'unknown'}, {'expired_token'}, {'slow_down', <new interval ms>}, {'authorization_pending'},
-- {'access_denied'} or {'approved', <subject kind>, <subject id>}; the last two end the record, so
-- an approval is handed out once.
local h = redis.call('HMGET', KEYS[1], 'status', 'expires', 'next_poll', 'interval', 'subject_kind', 'subject_id')
if not h[1] then return {'unknown'} end
local now = tonumber(ARGV[1])
if now >= tonumber(h[2]) then
  redis.call('DEL', KEYS[1])
  return {'expired_token'}
end
local interval = tonumber(h[4])
if now < tonumber(h[3]) then
  interval = interval + tonumber(ARGV[2])
  redis.call('HSET', KEYS[1], 'interval', interval, 'next_poll', now + interval)
  return {'slow_down', tostring(interval)}
end
redis.call('HSET', KEYS[1], 'next_poll', now + interval)
if h[1] == 'pending' then return {'authorization_pending'} end
redis.call('DEL', KEYS[1])
if h[1] == 'denied' then return {'access_denied'} end
return {'approved', h[5], h[6]}
