--[[ pause: stop the queue handing out jobs; claim-3.lua answers nothing while it is set.
  KEYS[1] meta
  ARGV[1] queue base
  Returns: 1 paused now   0 already paused (nothing published)
  Held jobs run on and settle; add still works. Publishes {"event":"paused"}. ]]
if redis.call('HSETNX', KEYS[1], 'paused', '1') == 0 then return 0 end
redis.call('PUBLISH', ARGV[1] .. 'events', '{"event":"paused"}')
return 1
