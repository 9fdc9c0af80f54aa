--[[ extend_lock: checkpoint a held lease (the seed's @extend_lock2; native twin EMQ.EXTEND).
  KEYS[1] active   KEYS[2] the job row
  ARGV[1] id   ARGV[2] token (the attempts the holder claimed with)   ARGV[3] lease ms
  Returns, checked in this order:
    -1 no such row
    error 'EMQSTALE extend token mismatch' (not the current holder)
    -3 the id has left active (a reaped lease never comes back)
    1 re-scored to server TIME + lease
  Native (functions) also refuses, before anything else:
    'ERR EMQ.EXTEND lease_ms must be a positive integer'
    'ERR EMQ.EXTEND lease_ms must be at most 2199023255552' (EMQ_MAX_INT, as Python's gate)
    'ERR EMQ.EXTEND keys do not match the queue layout'
  and stamps the row's lease_epoch with the server run id on a re-score. ]]
if EMQ_NATIVE then
  local lease = emq_posint(ARGV[3])
  if not lease then
    return redis.error_reply('ERR EMQ.EXTEND lease_ms must be a positive integer')
  end
  if lease > EMQ_MAX_INT then
    return redis.error_reply('ERR EMQ.EXTEND lease_ms must be at most 2199023255552')
  end
  local base = string.match(KEYS[1], '^([^{}]+:{[^{}]+}:)active$')
  if not base or KEYS[2] ~= base .. 'job:' .. ARGV[1] then
    return redis.error_reply('ERR EMQ.EXTEND keys do not match the queue layout')
  end
end
-- 1. the row: its attempts field is the fencing token; no row answers -1
local att = redis.call('HGET', KEYS[2], 'attempts')
if not att then return -1 end
-- 2. the token fence: a stale holder may not extend
if att ~= ARGV[2] then
  return redis.error_reply('EMQSTALE extend token mismatch')
end
-- 3. membership: an id no longer in active answers -3
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return -3 end
-- 4. the re-score, on the SERVER clock: the lease is the active score
redis.call('ZADD', KEYS[1], emq_now() + tonumber(ARGV[3]), ARGV[1])
if EMQ_NATIVE then redis.call('HSET', KEYS[2], 'lease_epoch', emq_run_id()) end
return 1
