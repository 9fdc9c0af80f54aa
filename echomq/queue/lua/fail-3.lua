--[[ fail: a held job's handler failed; retry later with backoff, or dead-letter it.
  KEYS[1] active   KEYS[2] scheduled   KEYS[3] dead
  ARGV[1] queue base   ARGV[2] id   ARGV[3] token   ARGV[4] error text
  ARGV[5] backoff base ms   ARGV[6] backoff cap ms   ARGV[7] record ('1' = always)
  ARGV[8] '1' = dead-letter at once, whatever tries remain (a deterministic failure,
          such as a result that cannot be stored; optional, default retry)
  ARGV[9] the retry's delay in ms, instead of the backoff (optional; '' = the backoff)
  ARGV[10] full jitter: a decimal r in [0, 1] drawn by the host; the backoff becomes
          floor(delay * r) (optional; ignored when ARGV[9] is given)
  ARGV[11] the attempt's error as a JSON object {"type", "message", "traceback"}
          (optional): stored with "at" (server ms) and "attempt" (the token) added,
          appended to the row's `errors` (a JSON array, newest last, the last 10 kept;
          a nested object or array in it is dropped: each error stays flat)
  Returns: 1 retrying (scheduled)   2 dead
    -1 no such row   -2 stale token   -3 not in active
  Tries are claims less hand-backs (a graceful shutdown's give-back is not a try),
  counted from the row's tries_base (set by retry_dead-1.lua: a retried dead job
  starts its tries afresh while its attempts, the token, only ever goes up).
  The delay is base * 2^(tries - 1), capped. A dead-letter is appended to the
  outcome stream when it is declared (with the job's name and payload when the
  declaration asks: meta's record_payload). When someone listens (the `listeners`
  mark), the job is told on the job-events channel: 'failed' (a retry is scheduled)
  or 'dead', with the error as the reason. Metrics: metrics:finished counts 'retried' (a
  retry is scheduled) or 'dead'; metrics:run / metrics:wait get the attempt's times (see
  _lib.lua).
  Charts: the minute's first settle snapshots those metrics first (_lib_charts.lua).
  Recording never fails on what other writers put in the stream: each entry's id is of
  this call's millisecond, and an outside entry with an id from the future (up to the
  largest, which would refuse every XADD) is first set aside to `foreign` (emq_xadd,
  _lib.lua), so a settled job is never missing from the recorded history.
  Dedup: a dead job frees the dedup id it holds (emq_dedup_release, _lib_dedup.lua).
  Flows: a dead child is counted on its waiting parent (emq_flow.settled, _lib_flow.lua):
  under on_child_failure 'fail' the parent is dead-lettered naming it. ]]
local p = ARGV[1]
local id = ARGV[2]
local jk = p .. 'job:' .. id
local row = redis.call('HMGET', jk, 'attempts', 'max_attempts', 'released', 'group', 'created_at',
  'claimed_at', 'tries_base')
if not row[1] then return -1 end
if row[1] ~= ARGV[3] then return -2 end
if not redis.call('ZSCORE', KEYS[1], id) then return -3 end
-- the attempt's error is read before any write: a malformed one refuses the whole call
local attempt_error = nil
if ARGV[11] and ARGV[11] ~= '' then
  local ok, decoded = pcall(cjson.decode, ARGV[11])
  if not ok or type(decoded) ~= 'table' then
    return redis.error_reply('ERR EMQ.FAIL the error entry must be a JSON object')
  end
  attempt_error = {}
  for k, v in pairs(decoded) do  -- kept flat (emq_json_append): nested values dropped
    if type(v) ~= 'table' then attempt_error[k] = v end
  end
end
local now = emq_now()
emq_chart_tick(p, now)
redis.call('ZREM', KEYS[1], id)
if attempt_error then
  attempt_error['at'] = now
  attempt_error['attempt'] = tonumber(ARGV[3])
  emq_json_append(jk, 'errors', cjson.encode(attempt_error), 10, nil)
end
if row[4] then emq_release_slot(p, row[4]) end
local tries = tonumber(row[1]) - tonumber(row[3] or '0') - tonumber(row[7] or '0')
local run, wait = {}, {}
emq_observe(run, wait, now, row[5], row[6])
emq_observe_flush(p, run, wait)
if ARGV[8] ~= '1' and tries < tonumber(row[2]) then
  local delay
  if ARGV[9] and ARGV[9] ~= '' then
    delay = tonumber(ARGV[9])
  else
    delay = tonumber(ARGV[5]) * (2 ^ (tries - 1))
    local cap = tonumber(ARGV[6])
    if delay > cap then delay = cap end
    if ARGV[10] and ARGV[10] ~= '' then delay = delay * tonumber(ARGV[10]) end
  end
  redis.call('HSET', jk, 'state', 'scheduled', 'last_error', ARGV[4])
  redis.call('ZADD', KEYS[2], now + math.floor(delay), id)
  redis.call('HINCRBY', p .. 'metrics:finished', 'retried', 1)
  if emq_listened(p) then emq_tell(p, 'failed', id, ARGV[4]) end
  return 1
end
redis.call('HSET', jk, 'state', 'dead', 'last_error', ARGV[4], 'finished_at', now)
emq_dedup_release(p, id)
redis.call('ZADD', KEYS[3], now, id)
redis.call('HINCRBY', p .. 'metrics:finished', 'dead', 1)
local recording, with_payload = emq_recording(p, ARGV[7])
if recording then
  local name, body = emq_job_body(jk, with_payload)
  local entry = emq_record(p, id, 'dead', ARGV[4], row[1], now, row[5], row[6], name, body)
  redis.call('HSET', jk, 'entry', entry)
end
if emq_listened(p) then emq_tell(p, 'dead', id, ARGV[4]) end
if emq_flow.on(p) then emq_flow.settled(p, id, false, ARGV[4], ARGV[7], now) end
return 2
