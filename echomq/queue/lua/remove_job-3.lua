--[[ remove_job: delete a job that no worker holds (pending or scheduled).
  KEYS[1] pending   KEYS[2] scheduled   KEYS[3] the job row
  ARGV[1] queue base   ARGV[2] id
  Returns: 1 removed   -1 no such row   -4 in a state that cannot be removed ]]
local p = ARGV[1]
local id = ARGV[2]
local row = redis.call('HMGET', KEYS[3], 'state', 'group')
local state, g = row[1], row[2]
if not state then return -1 end
if state ~= 'pending' and state ~= 'scheduled' then return -4 end
redis.call('ZREM', KEYS[1], id)
redis.call('ZREM', KEYS[2], id)
if g then
  local lane = p .. 'lane:' .. g
  redis.call('ZREM', lane, id)
  if redis.call('ZCARD', lane) == 0 then redis.call('LREM', p .. 'ring', 0, g) end
end
redis.call('DEL', KEYS[3])
return 1
