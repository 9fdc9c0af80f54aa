--[[ complete: settle held jobs as completed (or cancelled), one or many per call.
  KEYS[1] active   KEYS[2] completed
  ARGV[1] queue base   ARGV[2] record ('1': always append to the outcome stream;
  otherwise only when the stream is declared; the entry carries the job's name and
  payload when the declaration asks: meta's record_payload)
  ARGV[3] keep (completed rows to keep; -1 keeps all; on a declared queue a row the
  archive has not folded is never dropped)
  ARGV[4..] quadruples (id, token, outcome 'completed'|'cancelled', result); at most 1000
  Returns: one code per job, checked in the seed's order:
    1 settled   -1 no such row   -2 stale token   -3 not in active
  When someone listens (the `listeners` mark: one EXISTS per call), each settled job is
  told on the job-events channel as 'completed' or 'cancelled'.
  A cancelled job is a completion whose result is 'cancelled:<reason>'.
  Metrics: metrics:finished counts each outcome ('completed', 'cancelled'), and
  metrics:run / metrics:wait get the attempt's run and wait times (see _lib.lua).
  Charts: the minute's first settle snapshots those metrics first (_lib_charts.lua).
  Recording never fails on what other writers put in the stream: each entry's id is of
  this call's millisecond, and an outside entry with an id from the future (up to the
  largest, which would refuse every XADD) is first set aside to `foreign` (emq_xadd,
  _lib.lua), so a settled job is never missing from the recorded history.
  Dedup: a settled job frees the dedup id it holds (emq_dedup_release, _lib_dedup.lua;
  one EXISTS a call when the queue never used a dedup id).
  Flows: a settled child is counted on its waiting parent (emq_flow.settled,
  _lib_flow.lua), which its last child releases to pending in this call.
  Cost per job (callgrind, batches of 100): a result of 'null' (a handler that returned
  None) is not written to the row, whose absent result reads as null (records.Job), and
  the row's group is asked for only while some group has a job active (the `gactive`
  hash, whose last slot's release deletes it): a field written or looked up costs ~2,000
  instructions a job, a lookup of a field the row lacks scans the whole row. ]]
local p = ARGV[1]
local now = emq_now()
local ids = {}
for i = 4, #ARGV, 4 do ids[#ids + 1] = ARGV[i] end
-- membership of every id in one call; checked per job after the row and the token
local held = redis.call('ZMSCORE', KEYS[1], unpack(ids))
local recording, with_payload = emq_recording(p, ARGV[2])
local flows = emq_flow.on(p)
local dedup_on = emq_dedup_on(p)
local grouped = redis.call('EXISTS', p .. 'gactive') == 1
local codes = {}
local done = {}
-- the settled jobs, in order (no `#t` in the loop: each is a search, ~100 instructions)
local k = 0
local settled, finished, outcomes = {}, {}, {}
local tally = {}
local run, wait = {}, {}
-- consecutive settled jobs that share their times (claimed together, added together) are
-- observed once, as a run of n: a call per job cost ~700 instructions a job
local seen_created, seen_started, seen = nil, nil, 0
for n, id in ipairs(ids) do
  local i = 4 * n
  local token, outcome, result = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local jk = p .. 'job:' .. id
  local row
  if grouped then
    row = redis.call('HMGET', jk, 'attempts', 'created_at', 'claimed_at', 'group')
  else
    row = redis.call('HMGET', jk, 'attempts', 'created_at', 'claimed_at')
  end
  local code = 1
  if not row[1] then
    code = -1
  elseif row[1] ~= token then
    code = -2
  elseif not held[n] or done[id] then
    code = -3
  end
  if code == 1 then
    done[id] = true
    if dedup_on then emq_dedup_release(p, id) end
    -- four spelled-out writes, not one HSET of a table built per job: the table and its
    -- unpack cost ~1,700 instructions a job (callgrind)
    if recording then
      local recorded = result
      if outcome == 'cancelled' then recorded = string.sub(result, 11) end
      local name, body = emq_job_body(jk, with_payload)
      local entry = emq_record(p, id, outcome, recorded, row[1], now, row[2], row[3], name,
        body)
      if result == 'null' then
        redis.call('HSET', jk, 'state', 'completed', 'finished_at', now, 'entry', entry)
      else
        redis.call('HSET', jk, 'state', 'completed', 'result', result, 'finished_at', now,
          'entry', entry)
      end
    elseif result == 'null' then
      redis.call('HSET', jk, 'state', 'completed', 'finished_at', now)
    else
      redis.call('HSET', jk, 'state', 'completed', 'result', result, 'finished_at', now)
    end
    k = k + 1
    settled[k] = id
    finished[2 * k - 1] = now
    finished[2 * k] = id
    outcomes[k] = outcome
    tally[outcome] = (tally[outcome] or 0) + 1
    if seen > 0 and row[3] == seen_started and row[2] == seen_created then
      seen = seen + 1
    else
      if seen > 0 then emq_observe(run, wait, now, seen_created, seen_started, seen) end
      seen_created, seen_started, seen = row[2], row[3], 1
    end
    if flows then emq_flow.settled(p, id, outcome == 'completed', result, ARGV[2], now) end
    if row[4] then
      redis.call('ZREM', KEYS[1], id)
      emq_release_slot(p, row[4])
    end
  end
  codes[n] = code
end
if k > 0 then
  emq_observe(run, wait, now, seen_created, seen_started, seen)
  emq_chart_tick(p, now)
  redis.call('ZREM', KEYS[1], unpack(settled))
  redis.call('ZADD', KEYS[2], unpack(finished))
  for outcome, n in pairs(tally) do redis.call('HINCRBY', p .. 'metrics:finished', outcome, n) end
  emq_observe_flush(p, run, wait)
  if emq_listened(p) then
    for n, id in ipairs(settled) do emq_tell(p, outcomes[n], id) end
  end
end
-- retention: drop the oldest completed rows beyond `keep` (bounded per call); on a
-- declared queue only those the archive has folded, stopping at the first it has not
local keep = tonumber(ARGV[3])
if keep >= 0 then
  local excess = redis.call('ZCARD', KEYS[2]) - keep
  if excess > 0 then
    if excess > 1000 then excess = 1000 end
    local old = redis.call('ZRANGE', KEYS[2], 0, excess - 1)
    local declared, folded = emq_fold_mark(p .. 'meta')
    local dropped = 0
    for _, id in ipairs(old) do
      local jk = p .. 'job:' .. id
      if declared and not emq_forgettable(declared, folded, redis.call('HGET', jk, 'entry'))
      then break end
      redis.call('DEL', jk)
      dropped = dropped + 1
    end
    if dropped > 0 then redis.call('ZREMRANGEBYRANK', KEYS[2], 0, dropped - 1) end
  end
end
return codes
