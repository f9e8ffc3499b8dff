-- Writes a batch's next checkpoint (src/batch/run.ts). Monotonic: a coordinator that lost its job
-- (and lags) can never move the checkpoint back.
-- KEYS[1]: the checkpoint. ARGV: the new checkpoint (JSON), its part count. Returns 1 when written.
local cur = redis.call('GET', KEYS[1])
if cur and cjson.decode(cur).parts >= tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
