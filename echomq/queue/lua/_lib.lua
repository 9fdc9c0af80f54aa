--[[ Shared helpers, prepended once to every script and once to the functions library.
  EMQ_NATIVE (set by the loader just above this file) is true inside the functions
  library and false for EVALSHA scripts: it switches on the native twins' extras.
  Nothing here writes unless called. ]]

-- a zset member longer than zset-max-listpack-value (64 bytes by default): a set created
-- with it is a skiplist (claim-3.lua keeps the active set one). Longer than any job id
-- (keys.MAX_NAME_LENGTH, 200 bytes), and never left in a set.
-- (a literal: the functions library's load has no `string` yet)
local EMQ_SKIPLIST_MEMBER = '~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~'
  .. '~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~'
  .. '~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~'

-- milliseconds on the SERVER clock, so workers whose clocks disagree agree on leases
local function emq_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- the server's run id: a lease stamped with it is known to belong to this server run
local function emq_run_id()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
end

-- the one bound on every duration (ms) and count: validate.MAX_INT in Python (2^41)
local EMQ_MAX_INT = 2199023255552

-- a positive integer given as a string, or nil; callers refuse it above EMQ_MAX_INT
local function emq_posint(s)
  if type(s) ~= 'string' or not string.match(s, '^[1-9]%d*$') then return nil end
  return tonumber(s)
end

-- a group's concurrency limit (glimits hash; 1 when unset)
local function emq_group_limit(p, g)
  return tonumber(redis.call('HGET', p .. 'glimits', g) or '1')
end

-- the ring holds a group while its lane has jobs and it is below its limit
local function emq_ring_offer(p, g)
  if redis.call('ZCARD', p .. 'lane:' .. g) == 0 then return end
  local act = tonumber(redis.call('HGET', p .. 'gactive', g) or '0')
  if act >= emq_group_limit(p, g) then return end
  if redis.call('LPOS', p .. 'ring', g) then return end
  redis.call('RPUSH', p .. 'ring', g)
end

-- a grouped job left active: give back its lane's slot (the seed's HINCRBY -1)
local function emq_release_slot(p, g)
  local act = redis.call('HINCRBY', p .. 'gactive', g, -1)
  if act <= 0 then redis.call('HDEL', p .. 'gactive', g) end
  emq_ring_offer(p, g)
end

-- The `groups` set holds exactly the groups whose lane has jobs (what counts() and the
-- listings walk for lane sizes): a group joins it here, with its lane's first job, and
-- leaves it in the same call that empties its lane (claim, remove_job, cancel, drain: through
-- emq_lane_left), so it stays bounded by the live groups, not by every group ever seen.

-- after a lane lost jobs: when it is empty, its group leaves `groups` (the ring is the
-- caller's: claim already popped the group, so no O(ring) LREM on the hot path).
-- Returns true when the lane still has jobs.
local function emq_lane_left(p, g)
  if redis.call('ZCARD', p .. 'lane:' .. g) > 0 then return true end
  redis.call('SREM', p .. 'groups', g)
  return false
end

-- take an unclaimed (pending or scheduled) job out of its set, or its lane when grouped
-- (a lane this empties leaves `groups` and the ring): remove_job's and cancel's one way
-- of forgetting a job nobody holds. The row is the caller's to delete.
local function emq_unqueue(p, pending, scheduled, id, g)
  redis.call('ZREM', pending, id)
  redis.call('ZREM', scheduled, id)
  if g then
    redis.call('ZREM', p .. 'lane:' .. g, id)
    if not emq_lane_left(p, g) then redis.call('LREM', p .. 'ring', 0, g) end
  end
end

-- make an id claimable: the pending set, or its lane (and the ring) when grouped
local function emq_make_pending(p, id, score, g)
  if g then
    redis.call('ZADD', p .. 'lane:' .. g, score, id)
    redis.call('SADD', p .. 'groups', g)
    emq_ring_offer(p, g)
  else
    redis.call('ZADD', p .. 'pending', score, id)
  end
end

-- the pending score: lower priority first, FIFO within a priority (seq < 2^43)
local function emq_score(priority, seq)
  return tonumber(priority) * 8796093022208 + tonumber(seq)
end

-- is this call recording outcomes, and with each job's name and payload? `force` is the
-- caller's '1', else the declared stream; the second answer is the declaration's
-- `record_payload` (archive.declare(payload=True)), read in the same one HMGET of meta
local function emq_recording(p, force)
  local meta = redis.call('HMGET', p .. 'meta', 'stream', 'record_payload')
  return force == '1' or meta[1] == '1', meta[2] == '1'
end

-- the row's name and payload, for an entry that records them (nil, nil when not asked)
local function emq_job_body(jk, with_payload)
  if not with_payload then return nil, nil end
  local row = redis.call('HMGET', jk, 'name', 'payload')
  return row[1], row[2]
end

-- stream id a <= b, compared as numbers (ms, then sequence): '10-0' sorts after '9-5'
local function emq_id_le(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if not am or not bm then return false end
  am, bm = tonumber(am), tonumber(bm)
  if am ~= bm then return am < bm end
  return tonumber(as) <= tonumber(bs)
end

-- Other writers may XADD to the outcome stream, with any id. One from the future (up to
-- the largest, 18446744073709551615-18446744073709551615, which exhausts the stream)
-- would push every later settle's entry to that id or refuse it ('The stream has
-- exhausted the last possible ID'): jobs stuck active, or outcomes whose ids say a time
-- they never had (a point-in-time restore then drops them). So an EchoMQ entry always
-- gets an id of its settle's millisecond (`<now>-*`), and an entry ahead of the server
-- clock by more than EMQ_AHEAD_MS is set aside by the settle that meets it (moved to the
-- list `foreign`, the archive driver reports it and never folds such an id). A last id
-- ahead by less is taken for a clock step back: the entry goes after it ('*'), as ever.
-- Why not record into a side stream instead: the archive keeps ONE checkpoint per queue,
-- an id; a second stream's ids cannot be ordered with the first's, and a folded id from
-- the future would leave every later outcome behind the checkpoint. One stream whose ids
-- follow the server clock keeps "settled means recorded, at its time" true.
local EMQ_AHEAD_MS = 60000

-- the millisecond part of a stream id (a float past 2^53: only ever compared)
local function emq_id_ms(sid)
  return tonumber(string.match(sid, '^(%d+)-'))
end

-- XINFO STREAM as a table
local function emq_stream_info(key)
  local raw = redis.call('XINFO', 'STREAM', key)
  local info = {}
  for i = 1, #raw, 2 do info[raw[i]] = raw[i + 1] end
  return info
end

-- Set aside the entries of the stream `key` ahead of now + EMQ_AHEAD_MS: they go to the
-- list `foreign` (JSON: id, fields, when), and the stream is rebuilt from the others,
-- same ids, same order, entries-added less the ones set aside (the driver's count of
-- lost entries stays true), its last id at the newest of: what it keeps, its last
-- deletion, the archive's `folded` mark and `<now>-0` (never below what the driver
-- folded). Costs one copy of what the stream holds, once per such foreign write.
local function emq_set_aside(p, key, info, now)
  local bound = now + EMQ_AHEAD_MS
  local old = key .. ':rebuild'
  redis.call('RENAME', key, old)
  local last, kept, moved, start = nil, 0, 0, '-'
  repeat
    local batch = redis.call('XRANGE', old, start, '+', 'COUNT', 1000)
    for _, e in ipairs(batch) do
      if emq_id_ms(e[1]) > bound then
        redis.call('RPUSH', p .. 'foreign',
          cjson.encode({id = e[1], fields = e[2], set_aside_at = now}))
        moved = moved + 1
      else
        redis.call('XADD', key, e[1], unpack(e[2]))
        last, kept = e[1], kept + 1
      end
    end
    if #batch > 0 then start = '(' .. batch[#batch][1] end
  until #batch < 1000
  redis.call('DEL', old)
  local deleted = info['max-deleted-entry-id']
  if emq_id_ms(deleted) > bound then deleted = '0-0' end
  local base = string.format('%d-0', now)
  local folded = redis.call('HGET', p .. 'meta', 'folded') or '0-0'
  for _, sid in ipairs({last or '0-0', deleted, folded}) do
    if emq_id_ms(sid) <= bound and not emq_id_le(sid, base) then base = sid end
  end
  if kept == 0 then redis.call('XADD', key, 'MAXLEN', '0', base, 'set_aside', moved) end
  redis.call('XSETID', key, base, 'ENTRIESADDED', tonumber(info['entries-added']) - moved,
    'MAXDELETEDID', deleted)
end

-- XADD one of EchoMQ's entries at its settle's millisecond (see EMQ_AHEAD_MS)
local function emq_xadd(p, now, fields)
  local key = p .. 'completions'
  local at = string.format('%d-*', now)
  local sid = redis.pcall('XADD', key, at, unpack(fields))
  if type(sid) ~= 'table' then return sid end
  -- the stream's last id is past this millisecond: a clock step back, or a foreign id
  local info = emq_stream_info(key)
  if emq_id_ms(info['last-generated-id']) > now + EMQ_AHEAD_MS then
    emq_set_aside(p, key, info, now)
    sid = redis.pcall('XADD', key, at, unpack(fields))
    if type(sid) ~= 'table' then return sid end
  end
  return redis.call('XADD', key, '*', unpack(fields))
end

-- append one item (the JSON text of a flat object: no object or array inside) to a row's
-- field holding a JSON array of such items, newest last, keeping at most `max_items` and,
-- when `max_bytes` is given, at most that many bytes of array text (the oldest go first;
-- the newest is always kept). Done on the text, never decoded: inside a JSON string a
-- quote is escaped, so `{"` opens an item and `},{"` joins two, nowhere else. A field
-- another writer left that is not such an array is replaced: this call never fails
-- halfway on it.
local function emq_json_append(jk, field, item, max_items, max_bytes)
  local old = redis.call('HGET', jk, field)
  if not old or string.sub(old, 1, 2) ~= '[{' or string.sub(old, -2) ~= '}]' then
    redis.call('HSET', jk, field, '[' .. item .. ']')
    return
  end
  local _, count = string.gsub(old, '{"', '')
  count = count + 1
  local size = #old + 1 + #item
  if count <= max_items and (not max_bytes or size <= max_bytes) then
    redis.call('HSET', jk, field, string.sub(old, 1, -2) .. ',' .. item .. ']')
    return
  end
  local text = string.sub(old, 2, -2) .. ',' .. item
  while count > max_items or (max_bytes and #text + 2 > max_bytes) do
    local join = string.find(text, '},{"', 1, true)
    if not join then break end
    text = string.sub(text, join + 2)
    count = count - 1
  end
  redis.call('HSET', jk, field, '[' .. text .. ']')
end

-- append one outcome to the outcome stream, inside the settling call; returns the
-- entry's id, which the caller stores on the row (`entry`) so that retention can tell
-- whether the archive has folded it. `started` is when the last attempt was claimed;
-- `name` and `body` (the payload JSON) are given only on a queue that records payloads.
-- The row's `errors` (each failed attempt's) and `logs` (job.log's lines), JSON arrays,
-- go with it when the row has them, so the archive keeps why a job died; so do a flow's
-- links (`parent`, `children`: _lib_flow.lua).
local function emq_record(p, id, outcome, result, attempts, now, created, started, name, body)
  local fields = {'job', id, 'outcome', outcome, 'result', result,
    'attempts', attempts or '0', 'at', now}
  local carried = {'errors', 'logs', 'parent', 'children'}
  local kept = redis.call('HMGET', p .. 'job:' .. id, unpack(carried))
  for i, field in ipairs(carried) do
    if kept[i] then
      fields[#fields + 1] = field
      fields[#fields + 1] = kept[i]
    end
  end
  if created then
    fields[#fields + 1] = 'created_at'
    fields[#fields + 1] = created
  end
  if started then
    fields[#fields + 1] = 'started_at'
    fields[#fields + 1] = started
  end
  if name then
    fields[#fields + 1] = 'name'
    fields[#fields + 1] = name
  end
  if body then
    fields[#fields + 1] = 'payload'
    fields[#fields + 1] = body
  end
  return emq_xadd(p, now, fields)
end

-- retention's one rule: may a finished row be forgotten? On an undeclared queue always;
-- on a declared one only once the archive folded its outcome (its `entry` at or below
-- the meta hash's `folded`, the floor's checkpoint). A row with no entry finished before
-- the declaration: nothing of it is waiting for the archive.
local function emq_forgettable(declared, folded, entry)
  if not declared or not entry then return true end
  return folded ~= false and folded ~= nil and emq_id_le(entry, folded)
end

-- the meta hash's retention view: is the stream declared, and how far has it folded?
local function emq_fold_mark(meta_key)
  local meta = redis.call('HMGET', meta_key, 'stream', 'folded')
  return meta[1] == '1', meta[2]
end

-- The metrics a scrape reads (echomq.prometheus) and echomq.metrics: per-outcome lifetime
-- counters of settled attempts in `metrics:finished` ('completed', 'cancelled', 'retried',
-- 'dead': one name per meaning, see the README's "counting outcomes") and run/wait
-- histograms in `metrics:run` and `metrics:wait`, one field per bucket (its upper bound
-- in ms, 'inf' past the last; NOT cumulative) plus 'sum' (ms) and 'count'. The bounds are
-- echomq.metrics.collector.BUCKETS_MS.
local EMQ_BUCKETS_MS = {5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
  60000, 300000, 900000, 3600000}
-- the same bounds as the hash fields (strings made once, not per observation)
local EMQ_BUCKET_FIELDS = {'5', '10', '25', '50', '100', '250', '500', '1000', '2500',
  '5000', '10000', '30000', '60000', '300000', '900000', '3600000'}
local EMQ_NBUCKETS = 16

-- a histogram accumulated in a call: {[ms] = n}, one entry per distinct duration (a batch
-- claimed together and settled together shares one run time, an added batch often one
-- wait), bucketed once per distinct value by emq_hist_flush, which writes each bucket's
-- count, 'sum' and 'count'. Bucketing each job cost a settle ~12,000 server
-- instructions a job (callgrind); this costs ~2,000.
local function emq_hist_add(h, ms, n)
  if ms < 0 then ms = 0 end
  h[ms] = (h[ms] or 0) + n
end

local function emq_hist_flush(key, h)
  local buckets, sum, count = {}, 0, 0
  for ms, n in pairs(h) do
    local b = 'inf'
    for i = 1, EMQ_NBUCKETS do
      if ms <= EMQ_BUCKETS_MS[i] then b = EMQ_BUCKET_FIELDS[i]; break end
    end
    buckets[b] = (buckets[b] or 0) + n
    sum = sum + ms * n
    count = count + n
  end
  if count == 0 then return end
  for field, n in pairs(buckets) do redis.call('HINCRBY', key, field, n) end
  redis.call('HINCRBY', key, 'sum', sum)
  redis.call('HINCRBY', key, 'count', count)
end

-- one settled attempt: run = now - started (its claim), wait = started - created. The
-- accumulators keep the rows' own strings (started, then created), so that numbers are
-- made and bucketed once per distinct value at the flush (a batch claimed together shares
-- its claimed_at, an added batch its created_at), not once per job
local function emq_observe(run, wait, now, created, started, n)
  if not started then return end
  run.now = now
  local per = wait[started]
  if not per then
    per = {}
    wait[started] = per
  end
  local c = created or false
  per[c] = (per[c] or 0) + (n or 1)
end

local function emq_observe_flush(p, run, wait)
  local now = run.now
  if not now then return end
  local runs, waits = {}, {}
  for started, per in pairs(wait) do
    local s = tonumber(started)
    if s then
      for created, n in pairs(per) do
        emq_hist_add(runs, now - s, n)
        local c = created and tonumber(created)
        if c then emq_hist_add(waits, s - c, n) end
      end
    end
  end
  emq_hist_flush(p .. 'metrics:run', runs)
  emq_hist_flush(p .. 'metrics:wait', waits)
end

-- wake idle consumers after an add: on work where there was none (`pending_was_empty`), or
-- on a delayed job that is now the queue's first due. An idle worker parks until its first
-- due scheduled job (or its poll), so a job due sooner must shorten that wait: without the
-- news it ran up to a poll late (one ZRANGE a delayed add; the first due is rarely new)
local function emq_announce_add(p, scheduled, pending_was_empty, delay, now)
  if delay == 0 then
    if not pending_was_empty then return end
  else
    local first = redis.call('ZRANGE', scheduled, 0, 0, 'WITHSCORES')[2]
    if not first or tonumber(first) < now + delay then return end
  end
  redis.call('PUBLISH', p .. 'events', '{"event":"added"}')
end

-- is anyone listening for per-job news (echomq.wait, echomq.events)? Their mark is a
-- key with a TTL that they keep alive; a settling call checks it ONCE, so a queue nobody
-- watches pays one EXISTS per call and publishes nothing
local function emq_listened(p)
  return redis.call('EXISTS', p .. 'listeners') == 1
end

-- tell the listeners one job's news on the queue's job-events channel (never on the
-- events channel, where every Consumer listens for wakeups and cancels)
local function emq_tell(p, kind, id, reason)
  local msg = '{"event":"' .. kind .. '","job":' .. cjson.encode(id)
  if reason then msg = msg .. ',"reason":' .. cjson.encode(reason) end
  redis.call('PUBLISH', p .. 'job-events', msg .. '}')
end

-- add one job's row unless its id exists (an idempotent add changes nothing); `delay`
-- > 0 schedules it (into `scheduled`, the caller's KEYS entry). add-2.lua and
-- cron_fire-4.lua share this, so a fired job is a job like any other. Returns true when
-- the row was written. `trace` is a W3C traceparent kept on the row (echomq.tracing);
-- `replay_of` ('<queue>/<id>', archive.replay) names the archived job it replays.
-- `unused` is the caller's word that no row has this id (it just checked: a generated
-- id), which spares a second EXISTS per job.
local function emq_add_job(p, scheduled, id, body, delay, priority, max_attempts, g, name,
                           now, trace, replay_of, unused)
  local jk = p .. 'job:' .. id
  if not unused and redis.call('EXISTS', jk) == 1 then return false end
  local seq = redis.call('INCR', p .. 'seq')
  local state = 'pending'
  if delay > 0 then state = 'scheduled' end
  if name ~= '' then  -- a task's job: its name in the same write (a call is ~5,000 instructions)
    redis.call('HSET', jk, 'state', state, 'attempts', 0, 'stalled', 0,
      'payload', body, 'priority', priority, 'max_attempts', max_attempts,
      'seq', seq, 'created_at', now, 'name', name)
  else
    redis.call('HSET', jk, 'state', state, 'attempts', 0, 'stalled', 0,
      'payload', body, 'priority', priority, 'max_attempts', max_attempts,
      'seq', seq, 'created_at', now)
  end
  if trace and trace ~= '' then redis.call('HSET', jk, 'traceparent', trace) end
  if replay_of and replay_of ~= '' then redis.call('HSET', jk, 'replay_of', replay_of) end
  if g then redis.call('HSET', jk, 'group', g) end
  if delay > 0 then
    redis.call('ZADD', scheduled, now + delay, id)
  else
    emq_make_pending(p, id, emq_score(priority, seq), g)
  end
  return true
end
