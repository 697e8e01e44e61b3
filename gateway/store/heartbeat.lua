-- A gateway instance's heartbeat for its leases in one tenant's in-flight set (gateway/store/leases.py): while the
-- deadline is ahead, admit.lua leaves the owner's leases alone; once it passes (the instance died), admit.lua frees
-- them when they would refuse a request.
-- KEYS[1] the tenant's owners hash (owner -> deadline ms)
-- ARGV: 1 owner (a request id up to its last '-'), 2 heartbeat ms, 3 lease ms
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local lease_ms = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], now + tonumber(ARGV[2]))
if redis.call('PTTL', KEYS[1]) < lease_ms then redis.call('PEXPIRE', KEYS[1], lease_ms) end
-- An owner silent for longer than a lease holds no lease any more (a restarted gateway is a new owner): forget it.
if redis.call('HLEN', KEYS[1]) > 16 then
  local fields = redis.call('HGETALL', KEYS[1])
  for i = 1, #fields, 2 do
    if tonumber(fields[i + 1]) < now - lease_ms then redis.call('HDEL', KEYS[1], fields[i]) end
  end
end
return 1
