-- Records a published image (src/container-images/store.ts): a new "<service>:<tag>" only while the
-- organization holds fewer than the limit; the same tag pushed again (a rebuild of the same
-- commit, a -dirty tag) replaces its record, which costs nothing against the limit.
-- KEYS[1]: the organization's images hash. ARGV: field, record JSON, max images per organization.
-- Returns "created", "replaced" or "too_many".
local field = ARGV[1]
if redis.call("HEXISTS", KEYS[1], field) == 1 then
  redis.call("HSET", KEYS[1], field, ARGV[2])
  return "replaced"
end
if redis.call("HLEN", KEYS[1]) >= tonumber(ARGV[3]) then return "too_many" end
redis.call("HSET", KEYS[1], field, ARGV[2])
return "created"
