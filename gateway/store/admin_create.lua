-- Create a tenant record only when missing, in one step: two racing creates cannot both win (the second would
-- overwrite the first's limits while both callers were told they created it).
--
-- KEYS[1]  the tenant's hash
-- ARGV     field, value, field, value, ... (without gen: a new record starts at gen 1)
-- Returns the new gen, or false when the tenant exists.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
redis.call('HSET', KEYS[1], unpack(ARGV))
return redis.call('HINCRBY', KEYS[1], 'gen', 1)
