--[[ drain: remove pending jobs (the pending set and every group's lane) and, when asked,
  scheduled jobs: their rows and their set entries, at most `budget` per call.
  KEYS[1] pending   KEYS[2] scheduled
  ARGV[1] queue base   ARGV[2] budget (rows deleted + lanes visited, at most 1000)
  ARGV[3] where to go on: 'pending' (the start), 'lanes:<SSCAN cursor of groups>:<skip>'
          (skip is 0 now: emptied lanes leave the set; an older call's count is honoured),
          'scheduled'   ARGV[4] '1' = scheduled jobs go too
  Returns: {jobs removed by this call, where the next call goes on ('done': nothing left)}.
  A lane this call empties leaves the ring and `groups` (so a group with no job left is
  forgotten; an old queue's stale members go on a drain's pass, too). Active, completed
  and dead jobs are untouched: an active grouped job settles as usual and its group finds
  an empty lane.
  Dedup: each removed job frees the dedup id it holds (emq_dedup_release, _lib_dedup.lua).
  Flows: each removed child is counted on its parent as failed, 'drained', as remove_job
  counts one (emq_flow.settled, _lib_flow.lua), before its row goes: under 'fail' the
  parent is dead-lettered (and its own parent hears of it); under 'ignore' it gets None
  for that result, and the last child to settle releases it. A parent on another queue
  hears through this queue's `flow_outbox` (the drain verb delivers it when done).
  A waiting parent is never drained itself (it is in `waiting`, not pending). Draining
  its queue drains and counts its children there: under 'fail' it ends dead, and its
  children elsewhere run on, their outcomes finding no parent waiting; under 'ignore' it
  waits for its children still active or elsewhere, and when a drained child was its
  last it is released into pending and drained in turn (each pass takes the pending set
  again after its own, so a drain leaves nothing pending), counted on its own parent. ]]
local p = ARGV[1]
local budget = tonumber(ARGV[2])
local pos = ARGV[3]
local removed = 0
local flows = emq_flow.on(p)
local now = flows and emq_now() or 0

-- up to `budget` ids from the head of a sorted set, with their rows
local function take(set)
  if budget <= 0 then return 0 end
  local ids = redis.call('ZRANGE', set, 0, budget - 1)
  if #ids == 0 then return 0 end
  local rows = {}
  for i, id in ipairs(ids) do rows[i] = p .. 'job:' .. id end
  for _, id in ipairs(ids) do
    emq_dedup_release(p, id)
    if flows then emq_flow.settled(p, id, false, 'drained', '0', now) end
  end
  redis.call('DEL', unpack(rows))
  if flows then
    redis.call('ZREM', set, unpack(ids))  -- by id: a parent released above may have joined
  else
    redis.call('ZREMRANGEBYRANK', set, 0, #ids - 1)  -- the head: faster than 1,000 ZREMs
  end
  budget = budget - #ids
  removed = removed + #ids
  return #ids
end

-- the pending set until it stays empty: a parent a drained child released joins it
local function take_pending()
  repeat until take(KEYS[1]) == 0
end

if pos == 'pending' then
  take_pending()
  if budget <= 0 then return {removed, pos} end
  pos = 'lanes:0:0'
end

if string.sub(pos, 1, 6) == 'lanes:' then
  -- lanes:<cursor>:<skip>: the SSCAN batch of `cursor`, past the `skip` lanes emptied
  local cursor, skip = string.match(pos, '^lanes:(%d+):(%d+)$')
  skip = tonumber(skip)
  repeat
    local scan = redis.call('SSCAN', p .. 'groups', cursor, 'COUNT', 100)
    for i, g in ipairs(scan[2]) do
      if i > skip then
        local lane = p .. 'lane:' .. g
        local took = take(lane)
        local left = emq_lane_left(p, g)  -- an emptied lane leaves `groups` now
        if took > 0 and not left then redis.call('LREM', p .. 'ring', 0, g) end
        budget = budget - 1  -- a lane visited counts against the budget too
        if budget <= 0 then
          -- the lanes this batch emptied left the set: the same cursor, rescanned, holds
          -- only the lanes not visited yet (and this one, when it still has jobs)
          return {removed, 'lanes:' .. cursor .. ':0'}
        end
      end
    end
    cursor = scan[1]
    skip = 0
  until cursor == '0'
  pos = 'scheduled'
end

if pos == 'scheduled' and ARGV[4] == '1' then
  take(KEYS[2])
  if flows then take_pending() end  -- a retrying child drained here released its parent
  if budget <= 0 then return {removed, pos} end
end
return {removed, 'done'}
