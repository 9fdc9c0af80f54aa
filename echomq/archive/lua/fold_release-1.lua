--[[ fold_release: give the fold lease back, only if it is still ours.

  KEYS[1] the lease key (emq:{q}:archive-lease)
  ARGV[1] our token

  Replies:
    1   released
    0   not ours (it lapsed, or another driver holds it): nothing done
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
