--[[ worker_beat: one worker's heartbeat record, renewed on its beat (the dashboard's Workers).
  KEYS[1] the prefix's workers set (worker id -> when its record lapses, server ms)
  KEYS[2] this worker's record (a hash; both keys carry the prefix's tag: one slot)
  ARGV[1] worker id   ARGV[2] keep ms (the record lapses this long after its last beat)
  ARGV[3..] field, value pairs: what the worker says of itself (host, pid, queues, held...)
  Writes started (first beat only) and last_beat on the server clock, trims the set of
  every id whose record lapsed. Returns 1. ]]
local keep = emq_posint(ARGV[2])
if not keep or keep > EMQ_MAX_INT then
  return redis.error_reply('EMQ.WORKER_BEAT keep_ms must be a positive integer')
end
if #ARGV % 2 ~= 0 then
  return redis.error_reply('EMQ.WORKER_BEAT fields must come in name, value pairs')
end
local now = emq_now()
redis.call('HSETNX', KEYS[2], 'started', now)
redis.call('HSET', KEYS[2], 'id', ARGV[1], 'last_beat', now)
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[2], keep)
redis.call('ZADD', KEYS[1], now + keep, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return 1
