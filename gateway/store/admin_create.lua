-- Create a tenant record only when missing, in one step: two racing creates cannot both win (the second would
-- overwrite the first's limits while both callers were told they created it).
--
-- KEYS[1]  the tenant's hash
-- ARGV     field, value, field, value, ... (without gen: a new record starts at gen 1; created_ms is set here)
-- Returns {the new gen, created_ms}, or false when the tenant exists.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
redis.call('HSET', KEYS[1], unpack(ARGV))
-- Redis' clock stamps the new record: a tenant deleted and created again is told apart from the old one
local clock = redis.call('TIME')
local created = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('HSET', KEYS[1], 'created_ms', created)
return {redis.call('HINCRBY', KEYS[1], 'gen', 1), created}
