-- A request's admission (or a read of the state, admitting nothing), against every scope at once:
-- all or nothing (src/ratelimit/limiter.ts runs it; docs/traffic.md describes the algorithm).
--
-- KEYS: per scope its `w` (log), `t` (tokens) and `s` (slots).
-- ARGV: mode ("admit" or "peek"), member, tokens, window ms, lease ms, then the grant asked for
-- with an admission (most requests, tokens each, most slots, lifetime ms; 0 requests: none),
-- the requests the admission counts as (an image request: one per image), then per scope rpm,
-- tpm, max concurrency (0: none).
-- Returns {admitted, retry after ms, never, "i:kind,..." exceeded, then per scope requests, tokens,
-- in flight, reset ms, then the requests and slots granted}. Granted requests are the members
-- `<member>:1..n`, granted slots `<member>:s1..n`; an admission counted as w requests logs
-- `<member>:r2..w` beside `<member>` (entries without tokens).
--
-- It runs before every limited request is queued, and Redis runs it while the request waits, so
-- its admission reads and writes as little as it can (9 commands for a scope with all three
-- limits, where a plain form takes 13): it reads only what a scope limits (a peek reads all);
-- the running sum comes with the tokens of the entries leaving the window in one HMGET and is
-- written once, with the new reservation; live leases are counted, not first swept (a crashed
-- gateway's expired ones go when the expiries are re-armed); and the log's and tokens'
-- expiries are re-armed only every tenth of a window, to a window and a tenth (`armed` in `t`
-- says when), so each still outlives its last admission by a window. The slots set is emptied
-- and so deleted by most request ends, so its lease-long expiry is set on every admission.

-- A grant takes at most 1/GRANT_FRACTION of what is left of any budget, and is not made for
-- fewer requests than GRANT_MIN: near its end a budget is spent one checked request at a time.
local GRANT_FRACTION, GRANT_MIN = 16, 4

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Numbers passed to redis.call are formatted each time: the ones used more than once go as strings.
local nowText = string.format('%d', now)
local mode, member, need = ARGV[1], ARGV[2], tonumber(ARGV[3])
local window, lease = tonumber(ARGV[4]), tonumber(ARGV[5])
local grantMax, share, slotsMax, life = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local weight = tonumber(ARGV[10])
local admit = mode == 'admit'
local horizon = now - window
local rearm = math.floor(window / 10)
local n = #KEYS / 3
local state = {}
local wait, never, exceeded = 0, 0, {}
for i = 0, n - 1 do
  local w, tk, s = KEYS[3 * i + 1], KEYS[3 * i + 2], KEYS[3 * i + 3]
  local rpm, tpm, conc = tonumber(ARGV[11 + 3 * i]), tonumber(ARGV[12 + 3 * i]), tonumber(ARGV[13 + 3 * i])
  local log = rpm > 0 or tpm > 0
  local old = redis.call('ZRANGEBYSCORE', w, '-inf', horizon)
  local sum, armed, freed = 0, 0, 0
  if log or #old > 0 or not admit then
    -- The sum and when the expiries were armed, with the tokens of (the first) entries leaving the window.
    local first = math.min(#old, 1000)
    local got = redis.call('HMGET', tk, 'sum', 'armed', unpack(old, 1, first))
    sum, armed = tonumber(got[1] or '0'), tonumber(got[2] or '0')
    for k = 3, #got do if got[k] then freed = freed + tonumber(got[k]) end end
    if #old > 0 then
      redis.call('HDEL', tk, unpack(old, 1, first))
      for j = first + 1, #old, 1000 do
        local last = math.min(j + 999, #old)
        local more = redis.call('HMGET', tk, unpack(old, j, last))
        for k = 1, #more do if more[k] then freed = freed + tonumber(more[k]) end end
        redis.call('HDEL', tk, unpack(old, j, last))
      end
      redis.call('ZREMRANGEBYSCORE', w, '-inf', horizon)
    end
  end
  sum = sum - freed
  local count = 0
  if rpm > 0 or not admit then count = redis.call('ZCARD', w) end
  local inflight = 0
  if conc > 0 or not admit then
    -- Without a log there is no re-arming to sweep expired leases: this admission does.
    if not log then redis.call('ZREMRANGEBYSCORE', s, '-inf', nowText) end
    inflight = redis.call('ZCOUNT', s, '(' .. nowText, '+inf')
  end
  if admit then
    if rpm > 0 and count + weight > rpm then
      exceeded[#exceeded + 1] = i .. ':requests'
      if weight > rpm then
        never = 1
      else
        -- It fits once the oldest count + weight - rpm entries have left the window.
        local e = redis.call('ZRANGE', w, count + weight - rpm - 1, count + weight - rpm - 1, 'WITHSCORES')
        wait = math.max(wait, tonumber(e[2]) + window - now)
      end
    end
    if tpm > 0 and sum + need > tpm then
      exceeded[#exceeded + 1] = i .. ':tokens'
      if need > tpm then
        never = 1
      else
        local excess = sum + need - tpm
        local entries = redis.call('ZRANGE', w, 0, -1, 'WITHSCORES')
        local gone = 0
        for j = 1, #entries, 2 do
          gone = gone + tonumber(redis.call('HGET', tk, entries[j]) or '0')
          if gone >= excess then
            wait = math.max(wait, tonumber(entries[j + 1]) + window - now)
            break
          end
        end
      end
    end
    if conc > 0 and inflight + 1 > conc then
      exceeded[#exceeded + 1] = i .. ':concurrency'
      -- Nobody knows when a request in flight ends: a second is a polite hint.
      wait = math.max(wait, 1000)
    end
  end
  -- {requests, tokens, in flight, sum to write, expiries armed at}
  state[i + 1] = {count, sum, inflight, freed ~= 0, armed}
end
-- A grant (src/ratelimit/allowances.ts): as many more requests as fit in every scope's remaining
-- budget divided by GRANT_FRACTION (tokens: a share each), and concurrency slots alike; none
-- below GRANT_MIN, so a budget near its end is spent one checked request at a time.
local granted, slotted = 0, 0
if admit and #exceeded == 0 and grantMax > 0 then
  local b, c, needsSlots = grantMax, slotsMax, false
  for i = 0, n - 1 do
    local rpm, tpm, conc = tonumber(ARGV[11 + 3 * i]), tonumber(ARGV[12 + 3 * i]), tonumber(ARGV[13 + 3 * i])
    local st = state[i + 1]
    if rpm > 0 then b = math.min(b, math.floor((rpm - st[1] - weight) / GRANT_FRACTION)) end
    if tpm > 0 then b = math.min(b, math.floor((tpm - st[2] - need) / (GRANT_FRACTION * math.max(share, 1)))) end
    if conc > 0 then
      needsSlots = true
      c = math.min(c, math.floor((conc - st[3] - 1) / GRANT_FRACTION))
    end
  end
  if b >= GRANT_MIN and (not needsSlots or c >= 1) then
    granted = b
    if needsSlots then slotted = c end
  end
end
-- Granted requests may be spent until now + life: they (and the request with them) are logged
-- as admitted then, so none leaves the window before a window has passed since its use.
local score = nowText
if granted > 0 then score = string.format('%d', now + life) end
local admitted = 0
if admit and #exceeded == 0 then
  admitted = 1
  for i = 0, n - 1 do
    local w, tk, s = KEYS[3 * i + 1], KEYS[3 * i + 2], KEYS[3 * i + 3]
    local rpm, tpm, conc = tonumber(ARGV[11 + 3 * i]), tonumber(ARGV[12 + 3 * i]), tonumber(ARGV[13 + 3 * i])
    local st = state[i + 1]
    if rpm > 0 or tpm > 0 then
      local entries, fields = {score, member}, {}
      for k = 2, weight do
        entries[#entries + 1] = score
        entries[#entries + 1] = member .. ':r' .. k
      end
      for k = 1, granted do
        entries[#entries + 1] = score
        entries[#entries + 1] = member .. ':' .. k
      end
      redis.call('ZADD', w, unpack(entries))
      st[1] = st[1] + weight + granted
      if tpm > 0 then
        st[2] = st[2] + need + granted * share
        fields = {member, ARGV[3]}
        for k = 1, granted do
          fields[#fields + 1] = member .. ':' .. k
          fields[#fields + 1] = ARGV[7]
        end
        st[4] = true
      end
      -- Fresh: armed less than a tenth of a window ago, so both keys outlive this admission by a
      -- window. A grant always re-arms them.
      local stale = granted > 0 or now - st[5] >= rearm
      if stale then
        fields[#fields + 1] = 'armed'
        fields[#fields + 1] = nowText
      end
      if st[4] then
        fields[#fields + 1] = 'sum'
        fields[#fields + 1] = st[2]
        st[4] = false
      end
      if #fields > 0 then redis.call('HSET', tk, unpack(fields)) end
      if stale then
        -- A grant's entries are scored life ahead: the keys outlive them by a window too.
        local keep = window + rearm
        if granted > 0 then keep = keep + life end
        redis.call('PEXPIRE', w, keep)
        redis.call('PEXPIRE', tk, keep)
        redis.call('ZREMRANGEBYSCORE', s, '-inf', nowText)
      end
    end
    if conc > 0 then
      local until_ = now + lease
      local slots = {until_, member}
      for k = 1, slotted do
        slots[#slots + 1] = until_
        slots[#slots + 1] = member .. ':s' .. k
      end
      redis.call('ZADD', s, unpack(slots))
      redis.call('PEXPIRE', s, ARGV[5])
      st[3] = st[3] + 1 + slotted
    end
  end
end
local out = {admitted, wait, never, table.concat(exceeded, ',')}
for i = 0, n - 1 do
  local st = state[i + 1]
  -- A sum changed by entries leaving the window and not written with a reservation.
  if st[4] then redis.call('HSET', KEYS[3 * i + 2], 'sum', st[2]) end
  local reset = 0
  if admitted == 1 and (tonumber(ARGV[11 + 3 * i]) > 0 or tonumber(ARGV[12 + 3 * i]) > 0) then
    -- Its newest entry is the one just added.
    reset = tonumber(score) - now + window
  else
    local newest = redis.call('ZRANGE', KEYS[3 * i + 1], -1, -1, 'WITHSCORES')
    if #newest > 0 then reset = math.max(0, tonumber(newest[2]) + window - now) end
  end
  out[#out + 1] = st[1]
  out[#out + 1] = st[2]
  out[#out + 1] = st[3]
  out[#out + 1] = reset
end
out[#out + 1] = granted
out[#out + 1] = slotted
return out
