--[[ rate_limit: set or clear how many jobs of the queue (or of one group) may start
  per window (the sliding windows of _lib_rate.lua; claim-3.lua enforces them).
  KEYS[1] rate
  ARGV[1] queue base   ARGV[2] group ('' = the whole queue)
  ARGV[3] max jobs per window ('' = clear the limit)   ARGV[4] the window, per_ms
  Returns: 1 set, or cleared   0 there was no such limit to clear
  'ERR EMQ.RATE max_jobs must be 1..100000 and per_ms 1..86400000' (as Python's gates).
  A group's parking ends here (its next claim checks the new limit; a handler's wait on
  it ends too); a cleared limit's log is deleted. `groups` counts the group limits, so
  claim's one HMGET sees that there are some. Publishes {"event":"added"}, so Consumers
  sleeping on the old window claim at once. ]]
local p = ARGV[1]
local g = ARGV[2]
local field, log = 'queue', p .. 'rlog'
if g ~= '' then field, log = 'g:' .. g, p .. 'rlog:' .. g end
local changed = 1
if ARGV[3] == '' then
  changed = redis.call('HDEL', KEYS[1], field)
  redis.call('DEL', log)
  if g ~= '' and changed == 1 and redis.call('HINCRBY', KEYS[1], 'groups', -1) <= 0 then
    redis.call('HDEL', KEYS[1], 'groups')
  end
else
  local max, per = emq_posint(ARGV[3]), emq_posint(ARGV[4])
  if not max or not per or max > emq_rate.MAX_JOBS or per > emq_rate.MAX_MS then
    return redis.error_reply('ERR EMQ.RATE max_jobs must be 1..100000 and per_ms 1..86400000')
  end
  if redis.call('HSET', KEYS[1], field, max .. ':' .. per) == 1 and g ~= '' then
    redis.call('HINCRBY', KEYS[1], 'groups', 1)
  end
end
if g ~= '' and redis.call('ZREM', p .. 'rparked', g) == 1 then
  emq_rate.reparked(p)
  emq_ring_offer(p, g)
end
redis.call('PUBLISH', p .. 'events', '{"event":"added"}')
return changed
