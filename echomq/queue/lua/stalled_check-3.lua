--[[ stalled_check: the count-thresholded sweep (the seed's @sweep_stalled;
  native twin EMQ.STALLED.CHECK).
  KEYS[1] active   KEYS[2] pending   KEYS[3] dead
  ARGV[1] queue base   ARGV[2] max_stalled   ARGV[3] limit
  Returns: {recovered ids, dead ids}. Per lapsed id (server clock, up to limit):
  leave active, HINCRBY stalled; below max_stalled recover (pending at the front,
  or its lane when grouped, giving back the lane's slot); at or above it dead-letter
  (state dead, last_error stalled, the dead set scored by the time it died (server
  clock, as fail-3.lua scores it), the declared stream).
  Metrics: metrics:stalls counts 'recovered' and 'dead_lettered', metrics:finished 'dead'.
  Charts: a dead-letter may snapshot those metrics first (_lib_charts.lua).
  The script, like the seed, creates a skeleton row for a ghost (no row) on HINCRBY.
  Native (functions) differs, every read and check before the first write:
    'ERR EMQ.STALLED.CHECK max_stalled must be a positive integer' (and limit);
    'ERR EMQ.STALLED.CHECK max_stalled must be at most 2199023255552' (and limit:
    EMQ_MAX_INT, the bound Python's gate checks);
    'ERR EMQ.STALLED.CHECK keys do not match the queue layout';
    a lease with no lease_epoch, or one from an earlier server run, is recovered
    without counting (a restart is never a stall);
    a ghost is only removed from active and listed nowhere;
    a grouped lapsed row refuses the whole call: 'EMQSTATE stalled lane not native'.
  When someone listens (the `listeners` mark, checked once per call), each dead-letter
  is told on the job-events channel as 'dead' with the reason 'stalled'.
  Dedup: a dead-letter frees the dedup id it holds (emq_dedup_release, _lib_dedup.lua).
  Flows: a dead-lettered child is counted on its parent (emq_flow.settled, _lib_flow.lua). ]]
local p = ARGV[1]
local maxst = tonumber(ARGV[2])
local lim = tonumber(ARGV[3])
if EMQ_NATIVE then
  local m, l = emq_posint(ARGV[2]), emq_posint(ARGV[3])
  if not m then
    return redis.error_reply('ERR EMQ.STALLED.CHECK max_stalled must be a positive integer')
  end
  if m > EMQ_MAX_INT then
    return redis.error_reply('ERR EMQ.STALLED.CHECK max_stalled must be at most 2199023255552')
  end
  if not l then
    return redis.error_reply('ERR EMQ.STALLED.CHECK limit must be a positive integer')
  end
  if l > EMQ_MAX_INT then
    return redis.error_reply('ERR EMQ.STALLED.CHECK limit must be at most 2199023255552')
  end
  if not string.match(p, '^[^{}]+:{[^{}]+}:$') or KEYS[1] ~= p .. 'active'
      or KEYS[2] ~= p .. 'pending' or KEYS[3] ~= p .. 'dead' then
    return redis.error_reply('ERR EMQ.STALLED.CHECK keys do not match the queue layout')
  end
end
local now = emq_now()
local exp = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, lim)
local recovered = {}
local dead = {}
local listened = nil

local function dead_letter(jk, id, attempts, created)
  emq_chart_tick(p, now)
  redis.call('HSET', jk, 'state', 'dead', 'last_error', 'stalled', 'finished_at', now)
  emq_dedup_release(p, id)
  redis.call('ZADD', KEYS[3], now, id)  -- scored by the time it died, as fail does
  redis.call('HINCRBY', p .. 'metrics:finished', 'dead', 1)
  redis.call('HINCRBY', p .. 'metrics:stalls', 'dead_lettered', 1)
  local recording, with_payload = emq_recording(p, '0')
  if recording then
    local started = redis.call('HGET', jk, 'claimed_at')
    local name, body = emq_job_body(jk, with_payload)
    local entry = emq_record(p, id, 'dead', 'stalled', attempts, now, created, started or nil,
      name, body)
    redis.call('HSET', jk, 'entry', entry)
  end
  dead[#dead + 1] = id
  if listened == nil then listened = emq_listened(p) end
  if listened then emq_tell(p, 'dead', id, 'stalled') end
  if emq_flow.on(p) then emq_flow.settled(p, id, false, 'stalled', '0', now) end
end

local function recover(jk, id, g)
  emq_make_pending(p, id, 0, g)  -- the front of pending, or of its lane
  redis.call('HSET', jk, 'state', 'pending')
  redis.call('HINCRBY', p .. 'metrics:stalls', 'recovered', 1)
  recovered[#recovered + 1] = id
end

if EMQ_NATIVE then
  -- reads and checks first: nothing is written if any lapsed row is grouped
  local run = emq_run_id()
  local rows = {}
  for i, id in ipairs(exp) do
    local row = redis.call('HMGET', p .. 'job:' .. id, 'attempts', 'group', 'lease_epoch',
      'created_at')
    if row[2] then return redis.error_reply('EMQSTATE stalled lane not native') end
    rows[i] = row
  end
  for i, id in ipairs(exp) do
    local jk = p .. 'job:' .. id
    local row = rows[i]
    redis.call('ZREM', KEYS[1], id)
    if not row[1] then
      -- a ghost: listed nowhere, no row written
    elseif row[3] ~= run then
      -- leased before this server run (or never stamped): a restart is not a stall
      recover(jk, id, nil)
    else
      local st = redis.call('HINCRBY', jk, 'stalled', 1)
      if st >= maxst then
        dead_letter(jk, id, row[1], row[4])
      else
        recover(jk, id, nil)
      end
    end
  end
  return {recovered, dead}
end

for _, id in ipairs(exp) do
  redis.call('ZREM', KEYS[1], id)
  local jk = p .. 'job:' .. id
  local g = redis.call('HGET', jk, 'group')
  -- count this stall; on an id with no row, HINCRBY creates one (as the seed does)
  local st = redis.call('HINCRBY', jk, 'stalled', 1)
  -- a grouped job gives back its lane's slot (the seed's HINCRBY -1), and the group
  -- rejoins the ring if its lane still has jobs: a dead-letter must not strand the lane
  if g then emq_release_slot(p, g) end
  if st >= maxst then
    local row = redis.call('HMGET', jk, 'attempts', 'created_at')
    dead_letter(jk, id, row[1], row[2])
  else
    recover(jk, id, g)
  end
end
return {recovered, dead}
