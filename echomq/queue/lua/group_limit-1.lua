--[[ group_limit: set how many jobs of one group may be active at once.
  KEYS[1] glimits
  ARGV[1] queue base   ARGV[2] group   ARGV[3] limit (a positive integer)
  Returns: 1. The ring follows the new limit at once: a group below it whose lane
  has jobs rejoins the ring (raising a limit frees its lane now, not at the next
  settle), and a group at or above it leaves the ring. ]]
local p = ARGV[1]
local g = ARGV[2]
local limit = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], g, limit)
local act = tonumber(redis.call('HGET', p .. 'gactive', g) or '0')
if act >= limit then
  redis.call('LREM', p .. 'ring', 0, g)
else
  emq_ring_offer(p, g)
end
return 1
