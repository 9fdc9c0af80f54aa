--[[ rate_limited: a held job's handler met an outside rate limit (echomq.RateLimited):
  hand the job back, uncounted, and make its queue (its group, when grouped) wait.
  KEYS[1] active   KEYS[2] pending   KEYS[3] rate
  ARGV[1] queue base   ARGV[2] id   ARGV[3] token   ARGV[4] the wait, ms (0..86400000)
  Returns: 1 handed back, the queue waits   2 handed back, its group waits
    -1 no such row   -2 stale token   -3 not in active
  The job goes back to pending (its lane when grouped) at its own place (priority, then
  FIFO): not a try against max_attempts (`released` goes up, as for a give-back; fail-3.lua
  counts claims less hand-backs). The wait only ever grows: the queue's `until` in
  `rate`, or the group's score in `rparked` (claim-3.lua skips it until then; `parked`
  in `rate` follows the first of them).
  'ERR EMQ.RATE the wait must be 0..86400000 ms'. ]]
local p = ARGV[1]
local id = ARGV[2]
local delay = tonumber(ARGV[4])
if not string.match(ARGV[4], '^%d+$') or delay > emq_rate.MAX_MS then
  return redis.error_reply('ERR EMQ.RATE the wait must be 0..86400000 ms')
end
local jk = p .. 'job:' .. id
local row = redis.call('HMGET', jk, 'attempts', 'group', 'priority', 'seq')
if not row[1] then return -1 end
if row[1] ~= ARGV[3] then return -2 end
if not redis.call('ZSCORE', KEYS[1], id) then return -3 end
local g = row[2]
local opens = emq_now() + delay
if delay > 0 and g then
  redis.call('ZADD', p .. 'rparked', 'GT', opens, g)
  emq_rate.reparked(p)
elseif delay > 0 then
  local old = tonumber(redis.call('HGET', KEYS[3], 'until') or '0')
  if opens > old then redis.call('HSET', KEYS[3], 'until', opens) end
end
redis.call('ZREM', KEYS[1], id)
redis.call('HINCRBY', jk, 'released', 1)
redis.call('HSET', jk, 'state', 'pending')
if g then emq_release_slot(p, g) end
emq_make_pending(p, id, emq_score(row[3] or '0', row[4] or '0'), g)
if g then return 2 end
return 1
