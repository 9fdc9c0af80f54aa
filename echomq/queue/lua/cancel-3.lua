--[[ cancel: cancel one job by id, deciding on the state this same call reads.
  KEYS[1] pending   KEYS[2] scheduled   KEYS[3] the job row
  ARGV[1] queue base   ARGV[2] id   ARGV[3] the cancel event (JSON, built by the caller)
  Returns {code, state}: the state the call found ('' when no row) and
    1 removed: it was pending or scheduled; its row goes, and its set or lane entry (a
      lane this call empties leaves `groups` and the ring), as remove_job does
    2 signalled: it was active; ARGV[3] is published on the queue's events channel, where
      a Consumer started with cancel=True hands it to the job's token (at most once:
      with nobody listening nobody hears, and the job runs on). The row is not touched.
   -1 no such row
   -6 any other state (completed, dead): nothing changes
  One read and one decision in one call: a job claimed an instant before is signalled,
  never refused as no longer removable. ]]
local p = ARGV[1]
local row = redis.call('HMGET', KEYS[3], 'state', 'group')
local state = row[1]
local code
if not state then
  code = -1
elseif state == 'pending' or state == 'scheduled' then
  emq_unqueue(p, KEYS[1], KEYS[2], ARGV[2], row[2])
  redis.call('DEL', KEYS[3])
  code = 1
elseif state == 'active' then
  redis.call('PUBLISH', p .. 'events', ARGV[3])
  code = 2
else
  code = -6
end
return {code, state or ''}
