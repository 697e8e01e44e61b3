-- A field-level update of an existing admin record (a tenant or a key), in one step: only the named fields are
-- written, so admin writes racing each other (a revocation and a PATCH) all land and none undoes another, and a
-- record deleted meanwhile is not brought back as a fragment.
--
-- KEYS[1]  the record's hash
-- ARGV[1]  a counter field to bump ("gen" for tenants, so every gateway refreshes its copy), or ""
-- ARGV[2..] field, value, field, value, ...
-- Returns the whole record after the update (HGETALL's flat list), or false when there is no such record.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return false
end
if #ARGV > 1 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 2))
end
if ARGV[1] ~= '' then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
end
return redis.call('HGETALL', KEYS[1])
