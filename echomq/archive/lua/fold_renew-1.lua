--[[ fold_renew: extend the fold lease, only if it is still ours.

  KEYS[1] the lease key (emq:{q}:archive-lease)
  ARGV[1] our token   ARGV[2] lease length, ms

  Replies:
    1   renewed until now + ARGV[2]
   -1   lost: it lapsed, or another driver holds it now
]]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
