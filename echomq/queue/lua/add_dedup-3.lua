--[[ add_dedup: add one job under a dedup id, or answer the job that holds the id.
  KEYS[1] pending   KEYS[2] scheduled   KEYS[3] the dedup hold (emq:{q}:dedup:<dedup id>)
  ARGV[1] queue base   ARGV[2..6] add's options: delay ms, priority, max_attempts,
  group ('' = none), name ('' = none)   ARGV[7] W3C traceparent ('' = none)
  ARGV[8] job id ('' = a generated one)   ARGV[9] payload JSON   ARGV[10] the dedup id
  ARGV[11] mode: 'until_done' | 'ttl' | 'debounce'   ARGV[12] the hold's TTL ms ('' = none)
  Returns: {id}: the new job's id, or the id of the job that holds the dedup id (its mode
  is the hold's, whatever this add asked). With mode 'debounce' on a 'debounce' hold
  whose job is still pending or scheduled, that job takes this payload and this delay
  (from now) and the hold's TTL starts again; an active job is left as it is.
  A job id that exists already (an idempotent add) is answered and takes no hold.
  'EMQBUSY queue is being obliterated' while obliterate removes the queue: nothing added.
  Helpers in _lib_dedup.lua; the hooks freeing the hold are in the scripts that finish
  a job. ]]
local p = ARGV[1]
if redis.call('HGET', p .. 'meta', 'obliterating') == '1' then
  return redis.error_reply('EMQBUSY queue is being obliterated')
end
local delay = tonumber(ARGV[2])
local mode = ARGV[11]
local ttl = nil
if ARGV[12] ~= '' then ttl = tonumber(ARGV[12]) end
local now = emq_now()
local pending_was_empty = redis.call('ZCARD', KEYS[1]) == 0
local holder, held_mode = emq_dedup_holder(p, KEYS[3])
local woke = false
if holder then
  if mode == 'debounce' and held_mode == 'debounce'
      and emq_dedup_replace(p, KEYS[1], KEYS[2], holder, ARGV[9], delay, now) then
    if ttl then redis.call('PEXPIRE', KEYS[3], ttl) end
    woke = true
  end
else
  local g = ARGV[5]
  if g == '' then g = nil end
  holder = ARGV[8]
  local generated = holder == ''
  if generated then
    repeat
      holder = tostring(redis.call('INCR', p .. 'id'))
    until redis.call('EXISTS', p .. 'job:' .. holder) == 0
  end
  if emq_add_job(p, KEYS[2], holder, ARGV[9], delay, ARGV[3], ARGV[4], g, ARGV[6], now,
      ARGV[7], '', generated) then
    emq_dedup_take(p, KEYS[3], holder, ARGV[10], mode, ttl)
    woke = true
  end
end
if woke then emq_announce_add(p, KEYS[2], pending_was_empty, delay, now) end
return {holder}
