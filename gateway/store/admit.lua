#!lua
-- The shebang declares a script that writes: a replica (a demoted master resyncing with an empty keyspace, say)
-- refuses it with READONLY, an outage, before it reads anything it could misjudge.
-- Admission: check everything, then take from every bucket or from none. Mirrors MemoryStore.admit.
-- KEYS: 1 tenant hash, 2 key hash, 3-5 tenant buckets (requests, input, output), 6-8 key buckets, 9 in-flight zset,
--       10 spent hash (fields d:<YYYYMMDD>, m:<YYYYMM> in tokens; cd:<YYYYMMDD>, cm:<YYYYMM> in micro-dollars),
--       11 owners hash (gateway instance -> heartbeat deadline ms; see reap_dead_owners)
-- ARGV: 1 model, 2 prompt tokens, 3 max tokens per completion (-1: the tenant's default), 4 request id, 5 lease ms,
--       6 completions (the reservation is max tokens x completions), 7 worst-case cost in micro-dollars,
--       8 owner heartbeat ms (the request id up to its last '-' names the gateway instance; 0: no owner)
-- Returns {reason, retry_ms, gen, reserved, day, month, then per bucket kind: limit, remaining, reset_ms (the tighter
--          of tenant and key), then for concurrency, daily and monthly tokens, the tenant's three buckets and daily
--          and monthly micro-dollars: limit, left}.
local tenant = redis.call('HMGET', KEYS[1], 'rpm', 'input_tpm', 'output_tpm', 'max_concurrent', 'daily_tokens',
  'monthly_tokens', 'default_max_tokens', 'models', 'gen', 'daily_budget_usd', 'monthly_budget_usd')
local key = redis.call('HMGET', KEYS[2], 'revoked', 'expires_at', 'rpm', 'input_tpm', 'output_tpm', 'tenant_id')
if not tenant[9] or not key[1] or key[1] == '1' then return {'unauthorized', 0, 0, 0, '', ''} end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local expires = tonumber(key[2])
if expires > 0 and expires * 1000 <= now then return {'unauthorized', 0, 0, 0, '', ''} end
local gen = tonumber(tenant[9])
if tenant[8] ~= '' and not string.find(',' .. tenant[8] .. ',', ',' .. ARGV[1] .. ',', 1, true) then
  return {'model_not_allowed', 0, gen, 0, '', ''}
end
local prompt = tonumber(ARGV[2])
local reserve = tonumber(ARGV[3])
if reserve < 0 then  -- no max_tokens: the default, at most one minute's output_tpm (Tenant.default_reservation)
  reserve = tonumber(tenant[7])
  local output_tpm = tonumber(tenant[3])
  if output_tpm and output_tpm > 0 and output_tpm < reserve then reserve = output_tpm end
end
reserve = reserve * tonumber(ARGV[6])

-- UTC civil date from days since the epoch (H. Hinnant's algorithm): budget periods follow Redis' clock too.
local function civil(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m, d
end
local today = math.floor(now / 86400000)
local y, m, d = civil(today)
local day, month = string.format('%04d%02d%02d', y, m, d), string.format('%04d%02d', y, m)
local names = {'requests', 'input_tokens', 'output_tokens'}
local needs = {1, prompt, reserve}
local limits = {tonumber(tenant[1]), tonumber(tenant[2]), tonumber(tenant[3]),
  tonumber(key[3]), tonumber(key[4]), tonumber(key[5])}
local levels = {}
local reason, retry_ms = '', 0
for i = 1, 6 do
  local limit, need = limits[i], needs[(i - 1) % 3 + 1]
  if limit > 0 then
    local state = redis.call('HMGET', KEYS[i + 2], 'v', 't')
    local level = limit
    if state[1] then level = math.min(limit, tonumber(state[1]) + (now - tonumber(state[2])) * limit / 60000) end
    levels[i] = level
    if need > level then
      local wait = math.ceil((need - level) * 60000 / limit)
      if wait > retry_ms or reason == '' then
        reason = names[(i - 1) % 3 + 1]
        if need > limit then reason = reason .. '_too_large' end
        retry_ms = math.max(retry_ms, wait)
      end
    end
  end
end
-- Concurrency and budgets outrank the buckets as the reason (their waits are the ones that matter); the buckets were
-- read first so that every answer, refusals included, reports them in the rate-limit headers.
redis.call('ZREMRANGEBYSCORE', KEYS[9], '-inf', now)
local max_concurrent = tonumber(tenant[4])
local total = prompt + reserve
local daily, monthly = tonumber(tenant[5]), tonumber(tenant[6])
local running = max_concurrent > 0 and redis.call('ZCARD', KEYS[9]) or 0
-- Leases whose gateway died (its heartbeat deadline in KEYS[11] passed: gateway/store/leases.py) end now, not at
-- their lease end: looked at only when they would refuse this request. An owner never heard of is left alone.
local function reap_dead_owners()
  local deadlines = {}
  for _, id in ipairs(redis.call('ZRANGE', KEYS[9], 0, -1)) do
    local owner = string.match(id, '^(.*%-)')
    if owner then
      if deadlines[owner] == nil then deadlines[owner] = tonumber(redis.call('HGET', KEYS[11], owner) or '-1') end
      if deadlines[owner] >= 0 and deadlines[owner] < now then redis.call('ZREM', KEYS[9], id) end
    end
  end
  return redis.call('ZCARD', KEYS[9])
end
if max_concurrent > 0 and running >= max_concurrent then running = reap_dead_owners() end
local spent_day = daily > 0 and tonumber(redis.call('HGET', KEYS[10], 'd:' .. day) or '0') or 0
local spent_month = monthly > 0 and tonumber(redis.call('HGET', KEYS[10], 'm:' .. month) or '0') or 0
-- Money budgets: USD in the tenant hash, micro-dollars here (rounded as spend.micro_usd rounds); costs are integers.
local function micro(usd) return math.floor((tonumber(usd or '0') or 0) * 1000000 + 0.5) end
local cost = tonumber(ARGV[7] or '0') or 0
local daily_usd, monthly_usd = micro(tenant[10]), micro(tenant[11])
local spent_day_usd = daily_usd > 0 and tonumber(redis.call('HGET', KEYS[10], 'cd:' .. day) or '0') or 0
local spent_month_usd = monthly_usd > 0 and tonumber(redis.call('HGET', KEYS[10], 'cm:' .. month) or '0') or 0
local function to_next_month()
  -- days to the first of next month: walk forward (at most 31 steps)
  local next_day = today + 1
  while select(2, civil(next_day)) == m do next_day = next_day + 1 end
  return next_day * 86400000 - now
end
if max_concurrent > 0 and running >= max_concurrent then
  reason, retry_ms = 'concurrency', 1000
elseif daily > 0 and spent_day + total > daily then
  reason, retry_ms = 'daily_budget', (today + 1) * 86400000 - now
elseif monthly > 0 and spent_month + total > monthly then
  reason, retry_ms = 'monthly_budget', to_next_month()
elseif daily_usd > 0 and spent_day_usd + cost > daily_usd then
  reason, retry_ms = 'daily_budget_usd', (today + 1) * 86400000 - now
elseif monthly_usd > 0 and spent_month_usd + cost > monthly_usd then
  reason, retry_ms = 'monthly_budget_usd', to_next_month()
end
local taken = reason == ''
if taken then
  for i = 1, 6 do
    if levels[i] then
      redis.call('HSET', KEYS[i + 2], 'v', tostring(levels[i] - needs[(i - 1) % 3 + 1]), 't', now)
      redis.call('PEXPIRE', KEYS[i + 2], 130000)
    end
  end
  redis.call('ZADD', KEYS[9], now + tonumber(ARGV[5]), ARGV[4])
  redis.call('PEXPIRE', KEYS[9], tonumber(ARGV[5]))
  local heartbeat_ms, owner = tonumber(ARGV[8] or '0') or 0, string.match(ARGV[4], '^(.*%-)')
  if heartbeat_ms > 0 and owner then
    redis.call('HSET', KEYS[11], owner, now + heartbeat_ms)
    redis.call('PEXPIRE', KEYS[11], tonumber(ARGV[5]))
  end
  redis.call('HINCRBY', KEYS[10], 'd:' .. day, total)
  redis.call('HINCRBY', KEYS[10], 'm:' .. month, total)
  if cost > 0 then
    redis.call('HINCRBY', KEYS[10], 'cd:' .. day, cost)
    redis.call('HINCRBY', KEYS[10], 'cm:' .. month, cost)
  end
  running, spent_day, spent_month = running + 1, spent_day + total, spent_month + total
  spent_day_usd, spent_month_usd = spent_day_usd + cost, spent_month_usd + cost
end
local out = {reason, retry_ms, gen, reserve, day, month}
for k = 1, 3 do
  local limit, remaining, reset = 0, 0, 0
  for _, i in ipairs({k, k + 3}) do
    if levels[i] then
      local after = levels[i]
      if taken then after = after - needs[k] end
      local r = math.max(0, math.floor(after))
      local t = math.max(0, math.floor((limits[i] - after) * 60000 / limits[i]))
      if limit == 0 then limit, remaining, reset = limits[i], r, t
      else limit, remaining, reset = math.min(limit, limits[i]), math.min(remaining, r), math.max(reset, t) end
    end
  end
  out[#out + 1] = limit
  out[#out + 1] = remaining
  out[#out + 1] = reset
end
-- What is left of the tenant-wide limits (limit 0: none), for the gateway's overlap gate: concurrency, budgets,
-- then the tenant's own buckets (shared by all its keys).
for _, pair in ipairs({{max_concurrent, running}, {daily, spent_day}, {monthly, spent_month}}) do
  out[#out + 1] = pair[1]
  out[#out + 1] = pair[1] - pair[2]
end
for k = 1, 3 do
  local limit, left = 0, 0
  if levels[k] then
    limit, left = limits[k], levels[k]
    if taken then left = left - needs[k] end
  end
  out[#out + 1] = limit
  out[#out + 1] = math.floor(left)
end
for _, pair in ipairs({{daily_usd, spent_day_usd}, {monthly_usd, spent_month_usd}}) do
  out[#out + 1] = pair[1]
  out[#out + 1] = pair[1] - pair[2]
end
return out
