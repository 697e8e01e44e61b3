-- Rotation's first half, in one step on Redis' clock: a revoked or expired key is refused (a replacement would
-- hand back access that was taken away or ran out), else its expiry is cut to now + grace (never extended), or
-- it is revoked at once when grace is 0. Only the changed field is written, so a revocation landing before or
-- after this one stays.
--
-- KEYS[1]  the key's record
-- ARGV[1]  grace in milliseconds (0: revoke now)
-- Returns {outcome, field, value, ...}: outcome "retired" | "missing" | "revoked" | "expired", then the record
-- as it was before the change (HGETALL's flat list).
local record = redis.call('HGETALL', KEYS[1])
if #record == 0 then
  return {'missing'}
end
local fields = {}
for i = 1, #record, 2 do
  fields[record[i]] = record[i + 1]
end
local time = redis.call('TIME')
local now_s = tonumber(time[1]) + tonumber(time[2]) / 1e6
local expires_at_s = tonumber(fields['expires_at']) or 0
local outcome = 'retired'
if fields['revoked'] == '1' then
  outcome = 'revoked'
elseif expires_at_s > 0 and expires_at_s <= now_s then
  outcome = 'expired'
else
  local grace_s = tonumber(ARGV[1]) / 1000
  if grace_s > 0 then
    local ends_s = now_s + grace_s
    if expires_at_s == 0 or ends_s < expires_at_s then
      redis.call('HSET', KEYS[1], 'expires_at', string.format('%.6f', ends_s))
    end
  else
    redis.call('HSET', KEYS[1], 'revoked', '1')
  end
end
table.insert(record, 1, outcome)
return record
