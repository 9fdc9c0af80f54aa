--[[ cron_fire: enqueue ONE fire of a cron schedule and advance its last fire, atomically.
  KEYS[1] pending   KEYS[2] scheduled   KEYS[3] schedules (name -> spec JSON)
  KEYS[4] schedule-fires (name -> last fire, epoch ms)
  ARGV[1] queue base (emq:{q}:)   ARGV[2] schedule name   ARGV[3] the spec JSON the
  caller computed the fire from   ARGV[4] fire time (epoch ms)   ARGV[5] the job id
  (derived from the name and the fire time)   ARGV[6] payload JSON   ARGV[7] delay ms
  ARGV[8] priority   ARGV[9] max_attempts   ARGV[10] group ('' = none)
  ARGV[11] job name ('' = none)
  Returns: the job id when this call fired (an id whose row still exists is left as it
  is, like an idempotent add); 0 when the fire time is not after the stored last fire
  (another scheduler fired it, or a later one); -1 when the schedule is gone or its spec
  is no longer the one the fire was computed from.
  Hook: emq_cron_recent (_lib_cron.lua) keeps the schedule's latest fire times. ]]
local p = ARGV[1]
local name = ARGV[2]
local at = emq_posint(ARGV[4])
if not at or at > EMQ_MAX_INT * 1000 then
  return redis.error_reply('EMQ.CRON_FIRE fire time must be a positive integer (ms)')
end
if redis.call('HGET', KEYS[3], name) ~= ARGV[3] then return -1 end
local last = tonumber(redis.call('HGET', KEYS[4], name) or '0')
if at <= last then return 0 end
redis.call('HSET', KEYS[4], name, at)
emq_cron_recent(KEYS[4], name, ARGV[4])
local g = ARGV[10]
if g == '' then g = nil end
local delay = tonumber(ARGV[7])
local pending_was_empty = redis.call('ZCARD', KEYS[1]) == 0
local fresh = emq_add_job(p, KEYS[2], ARGV[5], ARGV[6], delay, ARGV[8], ARGV[9], g,
  ARGV[11], emq_now())
-- wake idle consumers when work appears where there was none (as add does)
if fresh and pending_was_empty and delay == 0 then
  redis.call('PUBLISH', p .. 'events', '{"event":"added"}')
end
return ARGV[5]
