--[[ obliterate_keys: delete a batch of a marked queue's keys (found by SCAN on its base).
  KEYS[1] meta   KEYS[2] flow_outbox
  ARGV[1] queue base   ARGV[2..] the keys (at most 1000), each under the base
  Returns: how many keys were deleted (the meta hash and the outbox are never deleted
    here: the meta keeps the queue marked, the outbox holds what other queues are owed;
    obliterate_end deletes both, after the verb delivered the outbox)
    -1  the queue is not marked (never begun, or another obliterate already ended it)
  UNLINK: a large set, stream or hash is freed off the main thread.
  'ERR EMQ.OBLITERATE key outside the queue' when a key does not start with the base:
  nothing is deleted (nor told).
  Flows: a job whose parent waits on another queue (its row has `parent_queue`; only on
  a queue with the meta's `xflows` mark) and whose parent never heard of it is counted
  there as failed, 'obliterated', before its row goes: emq_flow.settled writes the
  outcome to the outbox, which the verb delivers before obliterate_end (flow_ack: under
  'fail' the parent is dead-lettered, under 'ignore' it gets None for that result). The
  work is one HEXISTS per row in the batch, three calls more per such job: within the
  batch's budget. A parent on this queue goes with it, untold, and so do its children
  here. Its children on other queues run on: each one's outcome, delivered to a parent
  that is gone, is a no-op (emq_flow.ack answers 0 and writes nothing). ]]
if redis.call('HGET', KEYS[1], 'obliterating') ~= '1' then return -1 end
local p = ARGV[1]
local doomed = {}
for i = 2, #ARGV do
  local k = ARGV[i]
  if string.sub(k, 1, #p) ~= p then
    return redis.error_reply('ERR EMQ.OBLITERATE key outside the queue')
  end
  if k ~= KEYS[1] and k ~= KEYS[2] then doomed[#doomed + 1] = k end
end
if #doomed == 0 then return 0 end
if redis.call('HGET', KEYS[1], 'xflows') == '1' then
  local rows = p .. 'job:'
  local now = emq_now()
  for _, k in ipairs(doomed) do
    local id = string.sub(k, #rows + 1)
    if string.sub(k, 1, #rows) == rows and not string.find(id, ':', 1, true)
        and redis.call('HEXISTS', k, 'parent_queue') == 1 then
      emq_flow.settled(p, id, false, 'obliterated', '0', now)
    end
  end
end
return redis.call('UNLINK', unpack(doomed))
