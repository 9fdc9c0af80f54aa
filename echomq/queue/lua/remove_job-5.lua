--[[ remove_job: delete a job that no worker holds: pending, scheduled, completed or dead.
  KEYS[1] pending   KEYS[2] scheduled   KEYS[3] completed   KEYS[4] dead   KEYS[5] the job row
  ARGV[1] queue base   ARGV[2] id
  Returns: 1 removed   -1 no such row   -4 in a state that cannot be removed (active)
  A lane this call empties leaves `groups` and the ring.
  A finished job's outcome stays in the outcome stream (and the archive) when recorded.
  A cancel by id is cancel-3.lua: it removes only a pending or scheduled job.
  Dedup: a removed job frees the dedup id it holds (emq_dedup_release, _lib_dedup.lua).
  Flows: a removed pending child is counted on its parent as failed, 'removed'
  (emq_flow.settled, _lib_flow.lua); a waiting parent is removed with its results
  (emq_flow.forget): its children run on, and their settles find no parent. ]]
local p = ARGV[1]
local id = ARGV[2]
local row = redis.call('HMGET', KEYS[5], 'state', 'group')
local state, g = row[1], row[2]
if not state then return -1 end
if state == 'completed' then
  redis.call('ZREM', KEYS[3], id)
elseif state == 'dead' then
  redis.call('ZREM', KEYS[4], id)
elseif state == 'pending' or state == 'scheduled' then
  emq_unqueue(p, KEYS[1], KEYS[2], id, g)
  if emq_flow.on(p) then emq_flow.settled(p, id, false, 'removed', '0', emq_now()) end
elseif state == 'waiting' then
  emq_flow.forget(p, id)
else
  return -4
end
emq_dedup_release(p, id)
redis.call('DEL', KEYS[5])
return 1
