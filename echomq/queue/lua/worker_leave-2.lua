--[[ worker_leave: a worker that stops gracefully takes its heartbeat record away.
  KEYS[1] the prefix's workers set   KEYS[2] this worker's record
  ARGV[1] worker id
  Returns 1 when the record was there, 0 when it had lapsed already. ]]
redis.call('ZREM', KEYS[1], ARGV[1])
return redis.call('DEL', KEYS[2])
