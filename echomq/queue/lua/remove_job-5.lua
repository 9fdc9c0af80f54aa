--[[ remove_job: delete a job that no worker holds: pending, scheduled, completed or dead.
  KEYS[1] pending   KEYS[2] scheduled   KEYS[3] completed   KEYS[4] dead   KEYS[5] the job row
  ARGV[1] queue base   ARGV[2] id   ARGV[3] '1' = unclaimed only (pending or scheduled:
  a cancel, which must never delete a job that finished since it looked)
  Returns: 1 removed   -1 no such row   -4 in a state that cannot be removed (active;
  completed or dead when unclaimed only)
  A lane this call empties leaves `groups` and the ring.
  A finished job's outcome stays in the outcome stream (and the archive) when recorded. ]]
local p = ARGV[1]
local id = ARGV[2]
local row = redis.call('HMGET', KEYS[5], 'state', 'group')
local state, g = row[1], row[2]
if not state then return -1 end
if ARGV[3] == '1' and state ~= 'pending' and state ~= 'scheduled' then return -4 end
if state == 'completed' then
  redis.call('ZREM', KEYS[3], id)
elseif state == 'dead' then
  redis.call('ZREM', KEYS[4], id)
elseif state == 'pending' or state == 'scheduled' then
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  if g then
    redis.call('ZREM', p .. 'lane:' .. g, id)
    if not emq_lane_left(p, g) then redis.call('LREM', p .. 'ring', 0, g) end
  end
else
  return -4
end
redis.call('DEL', KEYS[5])
return 1
