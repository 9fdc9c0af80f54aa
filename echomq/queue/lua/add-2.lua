--[[ add: enqueue one or more jobs in one call.
  KEYS[1] pending   KEYS[2] scheduled
  ARGV[1] queue base (emq:{q}:)   ARGV[2] delay ms   ARGV[3] priority (0..1023)
  ARGV[4] max_attempts   ARGV[5] group ('' = none)   ARGV[6] name ('' = none)
  ARGV[7] W3C traceparent to keep on each new row ('' = none; echomq.tracing)
  ARGV[8] replay_of: '<queue>/<id>' of the archived job these replay ('' = none)
  ARGV[9..] pairs of (job id or '' for a generated one, payload JSON)
  Returns: the list of ids, one per pair. A given id whose row exists is returned
  as it is and nothing about it changes (idempotent add).
  'EMQBUSY queue is being obliterated' while obliterate removes the queue: nothing added. ]]
local p = ARGV[1]
if redis.call('HGET', p .. 'meta', 'obliterating') == '1' then
  return redis.error_reply('EMQBUSY queue is being obliterated')
end
local delay = tonumber(ARGV[2])
local priority = ARGV[3]
local g = ARGV[5]
if g == '' then g = nil end
local now = emq_now()
local ids = {}
local pending_was_empty = redis.call('ZCARD', KEYS[1]) == 0
for i = 9, #ARGV, 2 do
  local id = ARGV[i]
  local generated = id == ''
  if generated then
    repeat
      id = tostring(redis.call('INCR', p .. 'id'))
    until redis.call('EXISTS', p .. 'job:' .. id) == 0
  end
  emq_add_job(p, KEYS[2], id, ARGV[i + 1], delay, priority, ARGV[4], g, ARGV[6], now,
    ARGV[7], ARGV[8], generated)
  ids[#ids + 1] = id
end
emq_announce_add(p, KEYS[2], pending_was_empty, delay, now)
return ids
