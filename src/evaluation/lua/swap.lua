-- Replaces the record at KEYS[1] with ARGV[2] if it still holds ARGV[1] (what the caller read).
-- Returns 1 when replaced, 0 when it changed meanwhile (the caller reads it again).
if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("SET", KEYS[1], ARGV[2])
  return 1
end
return 0
