-- Sets an organization's pull credential for one registry host (src/registry-credentials/store.ts):
-- a new host only while the organization holds fewer than the limit; a host already there is
-- replaced, which costs nothing against the limit.
-- KEYS[1]: the organization's credentials hash. ARGV: host, entry JSON, max hosts.
-- Returns "created", "replaced" or "too_many".
if redis.call("HEXISTS", KEYS[1], ARGV[1]) == 1 then
  redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
  return "replaced"
end
if redis.call("HLEN", KEYS[1]) >= tonumber(ARGV[3]) then return "too_many" end
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
return "created"
