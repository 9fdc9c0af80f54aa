--[[ fold_acquire: take the archive fold lease of one queue, or renew our own.

  KEYS[1] the lease key (emq:{q}:archive-lease)
  ARGV[1] our token   ARGV[2] lease length, ms

  Replies:
    1   the lease is ours until now + ARGV[2] (server clock)
    0   another driver holds it
]]
local holder = redis.call('GET', KEYS[1])
if holder == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
