-- A fair place in a priority band for an online job (src/queue/fair-share.ts): start-time fair
-- queueing over the band's flows, one flow per (organization, key).
-- KEYS[1]: the queue's BullMQ `prioritized` sorted set (score = priority * 2^32 + counter).
-- KEYS[2]: the band's flows, a sorted set of "<org>\n<key>" scored by each flow's finish tag.
-- ARGV: the band's lowest priority, its width, the org, the key, the job's cost (tag units),
-- the flows' lifetime (ms).
-- Returns {priority, keys}: the job's BullMQ priority and how many of its org's keys were ahead
-- (its cost was multiplied by that, so an org's keys share the org's one share).
local lo = tonumber(ARGV[1])
local width = tonumber(ARGV[2])
local org = ARGV[3]
local member = org .. "\n" .. ARGV[4]
local cost = tonumber(ARGV[5])
local SHIFT = 4294967296
-- The band's virtual time: the tag of its first waiting job (the next one a replica takes).
local first = redis.call("ZRANGEBYSCORE", KEYS[1], string.format("%.0f", lo * SHIFT),
  "(" .. string.format("%.0f", (lo + width) * SHIFT),
  "WITHSCORES", "LIMIT", 0, 1)
local v
if #first == 0 then
  -- Nobody waits in the band: every flow is even, at the latest finish tag (not 0: jobs of a burst
  -- whose adds have not landed yet still count). Back to the bottom once that is past half the band.
  local last = redis.call("ZRANGE", KEYS[2], -1, -1, "WITHSCORES")
  v = #last == 0 and 0 or math.floor(tonumber(last[2]))
  if v > width / 2 then
    redis.call("DEL", KEYS[2])
    v = 0
  end
else
  v = math.floor(tonumber(first[2]) / SHIFT) - lo
end
-- A flow whose jobs are all behind the virtual time is even with it: forgotten (the set stays small).
redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", v)
local prefix = org .. "\n"
local keys = 1
for _, m in ipairs(redis.call("ZRANGEBYSCORE", KEYS[2], "(" .. v, "+inf")) do
  if m ~= member and string.sub(m, 1, #prefix) == prefix then keys = keys + 1 end
end
local finish = tonumber(redis.call("ZSCORE", KEYS[2], member) or v)
local start = math.max(v, finish)
redis.call("ZADD", KEYS[2], start + cost * keys, member)
redis.call("PEXPIRE", KEYS[2], tonumber(ARGV[6]))
-- Past the band's width the tags stop growing: the band's tail is then first come, first served.
return { lo + math.min(math.floor(start), width - 1), keys }
