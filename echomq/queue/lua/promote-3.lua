--[[ promote: a scheduled job (delayed, or a retry waiting on its backoff) becomes
  pending now, in its priority/seq place (its lane when grouped).
  KEYS[1] scheduled   KEYS[2] pending   KEYS[3] the job row
  ARGV[1] queue base   ARGV[2] id
  Returns: 1 promoted   -1 no such row   -5 not scheduled
  Publishes {"event":"added"} so idle Consumers claim it at once. ]]
local p = ARGV[1]
local id = ARGV[2]
local row = redis.call('HMGET', KEYS[3], 'state', 'priority', 'seq', 'group')
if not row[1] then return -1 end
if row[1] ~= 'scheduled' then return -5 end
redis.call('ZREM', KEYS[1], id)
redis.call('HSET', KEYS[3], 'state', 'pending')
emq_make_pending(p, id, emq_score(row[2] or '0', row[3] or '0'), row[4])
redis.call('PUBLISH', p .. 'events', '{"event":"added"}')
return 1
