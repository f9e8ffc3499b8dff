-- Records a published proto version once (src/protos/store.ts): a version that exists is never
-- replaced, and the package's summary (latest version, count, times) changes with it, atomically.
-- KEYS[1]: the organization's packages hash, KEYS[2]: the package's versions hash.
-- ARGV: package, version, record JSON, max packages per organization, max versions per package, now (epoch s).
-- Returns "ok", "exists", "too_many_packages" or "too_many_versions".
local package, version = ARGV[1], ARGV[2]
if redis.call("HEXISTS", KEYS[2], version) == 1 then return "exists" end
local raw = redis.call("HGET", KEYS[1], package)
if not raw and redis.call("HLEN", KEYS[1]) >= tonumber(ARGV[4]) then return "too_many_packages" end
if redis.call("HLEN", KEYS[2]) >= tonumber(ARGV[5]) then return "too_many_versions" end

local function parts(v)
  local a, b, c = string.match(v, "^(%d+)%.(%d+)%.(%d+)$")
  return { tonumber(a), tonumber(b), tonumber(c) }
end
local function greater(x, y)
  local p, q = parts(x), parts(y)
  for i = 1, 3 do
    if p[i] ~= q[i] then return p[i] > q[i] end
  end
  return false
end

local now = tonumber(ARGV[6])
local summary = raw and cjson.decode(raw) or { package = package, created = now, versions = 0 }
summary.versions = summary.versions + 1
summary.updated = now
if not summary.latest or greater(version, summary.latest) then summary.latest = version end
redis.call("HSET", KEYS[2], version, ARGV[3])
redis.call("HSET", KEYS[1], package, cjson.encode(summary))
return "ok"
