--[[ claim: promote due scheduled jobs, then take up to `count` jobs under a lease.
  KEYS[1] pending   KEYS[2] scheduled   KEYS[3] active
  ARGV[1] queue base   ARGV[2] lease ms   ARGV[3] count (at most 1000)
  Returns: a flat list: the lease deadline (ms, server clock), then 4 entries per job:
    id, token (the new attempts), payload, name ('' when the job has none: a worker
    routes each job to the task registered under its name)
  Ungrouped jobs and the ring's groups take turns; groups take turns in the ring.
  A lane this call empties leaves `groups` in this call (emq_lane_left, _lib.lua).
  A paused queue (meta field `paused`, pause-1.lua) promotes due jobs, then answers {}.
  Native (functions): the row's lease_epoch is stamped with the server run id.
  Rate limits (_lib_rate.lua, one HMGET when none is set): a queue whose window is
  full, or that a handler asked to wait, answers {-wait_ms} (no job; the next slot opens
  in wait_ms); a group whose window is full leaves the ring until it opens; a call that
  finds nothing while a group is parked answers {-wait_ms} too. ]]
local p = ARGV[1]
local lease = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local now = emq_now()

-- 1. promote what is due (bounded, so one call never runs away)
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[2], id)
  local jk = p .. 'job:' .. id
  local row = redis.call('HMGET', jk, 'priority', 'seq', 'group')
  if row[1] then
    redis.call('HSET', jk, 'state', 'pending')
    emq_make_pending(p, id, emq_score(row[1], row[2]), row[3])
  end
end

-- a paused queue hands out nothing (due jobs above are still promoted, so a
-- Consumer's idle wait never spins on an overdue scheduled job)
if redis.call('HEXISTS', p .. 'meta', 'paused') == 1 then return {} end
local rl = emq_rate.open(p, now, count)
if rl then if rl.wait then return {-rl.wait} end count = rl.room end

-- 2. choose the ids: one ZPOPMIN for the lot when no group is runnable,
-- else ungrouped jobs and the ring's groups take turns
local ids = {}
if redis.call('LLEN', p .. 'ring') == 0 then
  local popped = redis.call('ZPOPMIN', KEYS[1], count)
  for i = 1, #popped, 2 do ids[#ids + 1] = popped[i] end
else
  -- the next grouped job from the ring; its group goes to the back if it may run more
  local function from_ring()
    local g = redis.call('LPOP', p .. 'ring')
    if not g then return nil end
    if rl and emq_rate.skip(p, rl, g, now) then return from_ring() end
    local id = redis.call('ZPOPMIN', p .. 'lane:' .. g)[1]
    if not id then
      emq_lane_left(p, g)
      return nil
    end
    redis.call('HINCRBY', p .. 'gactive', g, 1)
    if rl then emq_rate.took(rl, g, id) end
    -- the lane's last job takes its group out of `groups`; else back of the ring
    if emq_lane_left(p, g) then emq_ring_offer(p, g) end
    return id
  end
  local function from_pending()
    return redis.call('ZPOPMIN', KEYS[1])[1]
  end
  local ring_first = false
  for _ = 1, count do
    local id
    if ring_first then id = from_ring() or from_pending()
    else id = from_pending() or from_ring() end
    if not id then break end
    ids[#ids + 1] = id
    ring_first = not ring_first
  end
end
if #ids == 0 and rl then return emq_rate.idle(p, rl, now) end
if #ids == 0 then return {} end


-- 3. lease them all: one ZADD, then each row's token and state
local deadline = now + lease
local scored = {}
for n, id in ipairs(ids) do
  scored[2 * n - 1] = deadline
  scored[2 * n] = id
end
-- the active set is read and written by id in every claim and settle: a listpack (the
-- encoding of a zset under 129 members) does each of those in O(n), a skiplist in
-- O(log n). A set created with a member too long for a listpack is a skiplist and stays
-- one while it lives, so a claim that creates it adds such a member and drops it at once.
if redis.call('EXISTS', KEYS[3]) == 0 then
  scored[#scored + 1] = 0
  scored[#scored + 1] = EMQ_SKIPLIST_MEMBER
  redis.call('ZADD', KEYS[3], unpack(scored))
  redis.call('ZREM', KEYS[3], EMQ_SKIPLIST_MEMBER)
else
  redis.call('ZADD', KEYS[3], unpack(scored))
end
local epoch = nil
if EMQ_NATIVE then epoch = emq_run_id() end
local out = {deadline}
for n, id in ipairs(ids) do
  local jk = p .. 'job:' .. id
  -- one read and one write a job: the token is attempts + 1, written with the state
  local body = redis.call('HMGET', jk, 'attempts', 'payload', 'name')
  local att = (tonumber(body[1]) or 0) + 1
  if epoch then
    redis.call('HSET', jk, 'attempts', att, 'state', 'active', 'claimed_at', now,
      'lease_epoch', epoch)
  else
    redis.call('HSET', jk, 'attempts', att, 'state', 'active', 'claimed_at', now)
  end
  local at = 4 * n - 2  -- after the deadline, 4 entries a job (no `#out`: a search a job)
  out[at] = id
  out[at + 1] = att
  -- a skeleton row (a ghost the scripted sweep recovered) has no payload: JSON null
  out[at + 2] = body[2] or 'null'
  out[at + 3] = body[3] or ''
end
if rl then emq_rate.started(p, rl, now, out) end
return out
