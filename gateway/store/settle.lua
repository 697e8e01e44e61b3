#!lua
-- The shebang declares a script that writes: a replica (a demoted master resyncing with an empty keyspace, say)
-- refuses it with READONLY, an outage, before it reads anything it could misjudge.
-- Settlement: actual tokens replace the reservation. Mirrors MemoryStore.settle.
-- KEYS: 1 tenant hash, 2 key hash, 3-4 tenant buckets (input, output), 5-6 key buckets, 7 in-flight zset,
--       8 spent hash, 9 usage hash of the admission's day, 10 tenant requests bucket, 11 key requests bucket,
--       12 hash of recorded fallback request ids
-- ARGV: 1 request id, 2 reserved in, 3 reserved out, 4 actual in, 5 actual out, 6 day, 7 month, 8 model, 9 key id,
--       10 replay (1: sent again after a lost reply), 11 kind (final | void | record, see base.Settlement),
--       12 lease end ms, 13 cached input tokens (of actual in), 14 reserved cost, 15 actual cost (micro-dollars),
--       16 the tenant's created_ms when the request was admitted (0: not checked)
-- A settlement of a tenant deleted since (and perhaps created again under the same id: another tenant) is dropped,
-- not charged to the new one: a gateway may have held it through an outage.
if (ARGV[16] or '0') ~= '0' and redis.call('HGET', KEYS[1], 'created_ms') ~= ARGV[16] then return 0 end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local kind = ARGV[11]
local actual_in, actual_out = tonumber(ARGV[4]), tonumber(ARGV[5])
local cached_in = tonumber(ARGV[13] or '0') or 0
local reserved_cost, cost = tonumber(ARGV[14] or '0') or 0, tonumber(ARGV[15] or '0') or 0

local function count_usage()
  for _, prefix in ipairs({'', 'model:' .. ARGV[8] .. ':', 'key:' .. ARGV[9] .. ':'}) do
    redis.call('HINCRBY', KEYS[9], prefix .. 'requests', 1)
    redis.call('HINCRBY', KEYS[9], prefix .. 'input_tokens', actual_in)
    redis.call('HINCRBY', KEYS[9], prefix .. 'output_tokens', actual_out)
    -- written only where not zero: a day without prices or cache hits keeps its old shape
    if cached_in > 0 then redis.call('HINCRBY', KEYS[9], prefix .. 'cached_input_tokens', cached_in) end
    if cost > 0 then redis.call('HINCRBY', KEYS[9], prefix .. 'cost_micro_usd', cost) end
  end
  redis.call('EXPIRE', KEYS[9], 400 * 86400)
end

-- The money budgets' spend (micro-dollars): `delta` more for the admission's day and month.
local function spend(delta)
  if delta ~= 0 then
    redis.call('HINCRBY', KEYS[8], 'cd:' .. ARGV[6], delta)
    redis.call('HINCRBY', KEYS[8], 'cm:' .. ARGV[7], delta)
  end
end

if kind == 'record' then
  -- Served on a gateway's local buckets while Redis was down: Redis never saw its admission, so there is no
  -- reservation or in-flight entry here; count its usage and budget spend once (a resend after a lost reply is
  -- skipped), and leave the per-minute buckets alone (that minute has passed).
  if redis.call('HSETNX', KEYS[12], ARGV[1], 1) == 0 then return 0 end
  redis.call('EXPIRE', KEYS[12], 2 * 86400)
  redis.call('HINCRBY', KEYS[8], 'd:' .. ARGV[6], actual_in + actual_out)
  redis.call('HINCRBY', KEYS[8], 'm:' .. ARGV[7], actual_in + actual_out)
  spend(cost)
  count_usage()
  return 1
end

local removed = redis.call('ZREM', KEYS[7], ARGV[1])
-- A replay whose request is no longer in flight although its lease has not ended: the first attempt ran (or the
-- admission never did). Applying it would refund and count twice. (A minute of margin for clock skew.)
if ARGV[10] == '1' and removed == 0 and now < tonumber(ARGV[12]) - 60000 then return 0 end
local tenant = redis.call('HMGET', KEYS[1], 'rpm', 'input_tpm', 'output_tpm')
local key = redis.call('HMGET', KEYS[2], 'rpm', 'input_tpm', 'output_tpm')
local refund_in, refund_out = tonumber(ARGV[2]) - actual_in, tonumber(ARGV[3]) - actual_out

-- A refund fills the bucket up to its capacity; an extra charge may leave it in debt down to -limit.
local function adjust(bucket, limit, delta)
  limit = tonumber(limit or '0') or 0
  if limit <= 0 or delta == 0 then return end
  local state = redis.call('HMGET', bucket, 'v', 't')
  local level = limit
  if state[1] then level = math.min(limit, tonumber(state[1]) + (now - tonumber(state[2])) * limit / 60000) end
  level = math.max(-limit, math.min(limit, level + delta))
  redis.call('HSET', bucket, 'v', tostring(level), 't', now)
  redis.call('PEXPIRE', bucket, 130000)
end
adjust(KEYS[3], tenant[2], refund_in)
adjust(KEYS[4], tenant[3], refund_out)
adjust(KEYS[5], key[2], refund_in)
adjust(KEYS[6], key[3], refund_out)
local refund = refund_in + refund_out
if refund ~= 0 then
  redis.call('HINCRBY', KEYS[8], 'd:' .. ARGV[6], -refund)
  redis.call('HINCRBY', KEYS[8], 'm:' .. ARGV[7], -refund)
end
spend(cost - reserved_cost)
if kind == 'void' then
  -- The admission ran but its client never got the answer (it was refused or served elsewhere): its request
  -- unit goes back too.
  adjust(KEYS[10], tenant[1], 1)
  adjust(KEYS[11], key[1], 1)
else
  count_usage()
end
return 1
