--[[ cron_swap: replace one cron schedule's spec only if it is still the one the caller
  read (store, pause and resume never lose a change made meanwhile).
  KEYS[1] schedules (name -> spec JSON)
  ARGV[1] schedule name   ARGV[2] the spec the caller read ('' = none stored)
  ARGV[3] the new spec JSON
  Returns 1 when swapped, 0 when the stored spec is no longer ARGV[2]. ]]
local current = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if current ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
