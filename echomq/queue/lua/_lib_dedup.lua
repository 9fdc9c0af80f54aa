--[[ Deduplication (echomq.add's dedup_id): the helpers of add_dedup-3.lua and the short
  hooks of the scripts that finish or forget a job (complete, fail, stalled_check, cancel,
  remove_job, drain). A dedup id is held by the hash emq:{q}:dedup:<dedup id> (the
  queue's slot): `job`, the id of the job holding it, and `mode`: 'until_done',
  'ttl' or 'debounce'. A PEXPIRE bounds it when the add gave dedup_ttl_ms. The holding
  job's row keeps the dedup id in its field `dedup`, so the call that finishes it frees
  the hold: only a hold that still names that job (a newer job may hold the id now), and
  never a 'ttl' hold, which lasts its TTL whatever happens to the job. ]]

-- the job holding a dedup id and the hold's mode, or nil when the id is free. A hold
-- of mode until_done or debounce whose job has finished or is gone (completed, dead, a
-- row deleted by a path with no hook) is stale: it is freed here, before the add.
local function emq_dedup_holder(p, dk)
  local hold = redis.call('HMGET', dk, 'job', 'mode')
  if not hold[1] then return nil, nil end
  if hold[2] ~= 'ttl' then
    local state = redis.call('HGET', p .. 'job:' .. hold[1], 'state')
    if not state or state == 'completed' or state == 'dead' then
      redis.call('DEL', dk)
      return nil, nil
    end
  end
  return hold[1], hold[2]
end

-- the job `id` (just written) takes the dedup id `did` in `mode`, for `ttl` ms if given
local function emq_dedup_take(p, dk, id, did, mode, ttl)
  redis.call('DEL', dk)
  redis.call('HSET', dk, 'job', id, 'mode', mode)
  if ttl then redis.call('PEXPIRE', dk, ttl) end
  redis.call('HSET', p .. 'job:' .. id, 'dedup', did)
  redis.call('SET', p .. 'dedup-on', '1')
end

-- debounce: the holding job `id`, when it is still pending or scheduled, gets the new
-- payload and the new delay counted from now (at the back of its priority, a new seq).
-- Returns false when it is active (or anything else): then nothing changes.
local function emq_dedup_replace(p, pending, scheduled, id, body, delay, now)
  local jk = p .. 'job:' .. id
  local row = redis.call('HMGET', jk, 'state', 'group', 'priority')
  if row[1] ~= 'pending' and row[1] ~= 'scheduled' then return false end
  emq_unqueue(p, pending, scheduled, id, row[2])
  local seq = redis.call('INCR', p .. 'seq')
  redis.call('HSET', jk, 'payload', body, 'seq', seq)
  redis.call('HINCRBY', jk, 'debounced', 1)
  if delay > 0 then
    redis.call('HSET', jk, 'state', 'scheduled')
    redis.call('ZADD', scheduled, now + delay, id)
  else
    redis.call('HSET', jk, 'state', 'pending')
    emq_make_pending(p, id, emq_score(row[3], seq), row[2])
  end
  return true
end

-- has this queue ever taken a dedup hold? (the key `dedup-on`, set with the first hold,
-- gone with the queue): a settle of many jobs asks once, so a queue that never
-- deduplicates pays one EXISTS per call, not one HGET per job
local function emq_dedup_on(p)
  return redis.call('EXISTS', p .. 'dedup-on') == 1
end

-- hook: the job `id` finished (completed, cancelled, dead) or is being forgotten before
-- it ran (cancel, remove_job, drain): free the dedup id it holds. Called before its row
-- is deleted; one HGET for a job with no dedup id.
local function emq_dedup_release(p, id)
  local did = redis.call('HGET', p .. 'job:' .. id, 'dedup')
  if not did then return end
  local dk = p .. 'dedup:' .. did
  local hold = redis.call('HMGET', dk, 'job', 'mode')
  if hold[1] == id and hold[2] ~= 'ttl' then redis.call('DEL', dk) end
end
