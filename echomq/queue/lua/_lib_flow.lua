--[[ Flows (chain, group, chord): the helpers of flow_add-2.lua and of the settle hooks
  in complete-2.lua, fail-3.lua and stalled_check-3.lua, and of flow_ack-1.lua (a child
  on another queue: its outcome goes through its queue's `flow_outbox`). One table, `emq_flow`, so the
  concatenated library spends one local on them.
  A parent row waits in state 'waiting' (listed in the `waiting` set) with `outstanding`
  (its children not yet settled for good), `flow_mode` ('chain': one child, its result
  becomes the first argument; 'chord': the children's results, a list in their order,
  become it), `flow_policy` ('fail' or 'ignore'), `children` (a JSON array of ids) and
  `payload_limit` (the adding client's `payload_limit`: a payload the results would
  splice past it is not written; the parent is dead-lettered, as for a failed child).
  A child row has `parent` and `flow_index` (its place, from 1). Results wait in the
  hash `flow:<parent>` until the release reads them into the parent's payload and frees
  the hash. A child is counted once: `flow_counted` is set (HSETNX) by the transition
  that settles it for good, and only a parent still 'waiting' is touched, so a retried
  dead child settling again changes nothing. The queue's meta `flows` mark (set by the
  first flow_add) lets a settle of a queue without flows skip the per-job read. ]]
local emq_flow = {}

-- does this queue hold flows? One HGET per settling call
function emq_flow.on(p)
  return redis.call('HGET', p .. 'meta', 'flows') == '1'
end

-- the payload with `value` put first in its args ('{"args":[' is how the host writes a
-- task call); nil when the payload is not a task call
function emq_flow.splice(payload, value)
  local _, e = string.find(payload, '^{%s*"args"%s*:%s*%[')
  if not e then return nil end
  local rest = string.sub(payload, e + 1)
  if string.match(rest, '^%s*%]') then return string.sub(payload, 1, e) .. value .. rest end
  return string.sub(payload, 1, e) .. value .. ',' .. rest
end

-- a parent whose children all settled: their results go into its payload, the hash is
-- freed, it turns pending (and wakes the consumers). A payload the results make larger
-- than the row's `payload_limit` is never written: the parent is dead-lettered instead,
-- its own payload kept, and the reason returned (its own parent hears of it next)
function emq_flow.release(p, parent, pk, force, now)
  redis.call('DEL', p .. 'flow:' .. parent .. ':acked')
  local row = redis.call('HMGET', pk, 'payload', 'flow_mode', 'flow_size', 'priority', 'seq',
    'payload_limit')
  local rk = p .. 'flow:' .. parent
  local value
  if row[2] == 'chain' then
    value = redis.call('HGET', rk, '1') or 'null'
  else
    local n = tonumber(row[3])
    local parts = {}
    for i = 1, n do parts[i] = 'null' end
    local flat = redis.call('HGETALL', rk)
    for i = 1, #flat, 2 do parts[tonumber(flat[i])] = flat[i + 1] end
    value = '[' .. table.concat(parts, ',') .. ']'
  end
  local payload = emq_flow.splice(row[1], value) or row[1]
  local limit = tonumber(row[6])
  if limit and #payload > limit then
    local reason = "payload too large after its children's results: " .. #payload ..
      ' bytes; the limit is ' .. limit
    emq_flow.kill(p, parent, pk, reason, force, now)
    return reason
  end
  redis.call('DEL', rk)
  redis.call('ZREM', p .. 'waiting', parent)
  redis.call('HSET', pk, 'state', 'pending', 'payload', payload, 'outstanding', 0)
  emq_make_pending(p, parent, emq_score(row[4], row[5]), nil)
  redis.call('PUBLISH', p .. 'events', '{"event":"added"}')
  return nil
end

-- a waiting parent removed (remove_job): out of `waiting`, its results freed
function emq_flow.forget(p, parent)
  redis.call('DEL', p .. 'flow:' .. parent .. ':acked')
  redis.call('ZREM', p .. 'waiting', parent)
  redis.call('DEL', p .. 'flow:' .. parent)
end

-- a parent dead-lettered for a child's failure (on_child_failure="fail"); recorded like
-- any dead job, its `children` with it
function emq_flow.kill(p, parent, pk, reason, force, now)
  redis.call('DEL', p .. 'flow:' .. parent .. ':acked')
  redis.call('DEL', p .. 'flow:' .. parent)
  redis.call('ZREM', p .. 'waiting', parent)
  redis.call('HSET', pk, 'state', 'dead', 'last_error', reason, 'finished_at', now,
    'outstanding', 0)
  redis.call('ZADD', p .. 'dead', now, parent)
  redis.call('HINCRBY', p .. 'metrics:finished', 'dead', 1)
  local recording, with_payload = emq_recording(p, force)
  if recording then
    local name, body = emq_job_body(pk, with_payload)
    local created = redis.call('HGET', pk, 'created_at')
    redis.call('HSET', pk, 'entry',
      emq_record(p, parent, 'dead', reason, '0', now, created, nil, name, body))
  end
  if emq_listened(p) then emq_tell(p, 'dead', parent, reason) end
end

-- one child's outcome counted on its waiting parent: the result stored and the count
-- decremented (the last releases the parent), or under 'fail' the parent dead-lettered;
-- the reason when the parent died (its own parent hears of it next), else nil
function emq_flow.count(p, parent, pk, policy, child, index, ok, result, force, now)
  if ok or policy == 'ignore' then
    redis.call('HSET', p .. 'flow:' .. parent, index, ok and result or 'null')
    if redis.call('HINCRBY', pk, 'outstanding', -1) <= 0 then
      return emq_flow.release(p, parent, pk, force, now)
    end
    return nil
  end
  local reason = 'child ' .. child .. ' failed: ' .. string.sub(result, 1, 500)
  emq_flow.kill(p, parent, pk, reason, force, now)
  return reason
end

-- a job settled for good (completed: ok with its result JSON; dead or cancelled: not ok,
-- `why` says how): counted once on its waiting parent, which is released by its last
-- child or, under 'fail', dead-lettered by its first failed one (and so on up a chain).
-- A parent on another queue (`parent_queue`: another slot) is not touched: the outcome
-- goes to this queue's `flow_outbox` (field: the child's id), which flow_ack delivers
function emq_flow.settled(p, id, ok, result, force, now)
  local jk = p .. 'job:' .. id
  while true do
    local link = redis.call('HMGET', jk, 'parent', 'flow_index', 'parent_queue')
    if not link[1] or redis.call('HSETNX', jk, 'flow_counted', '1') == 0 then return end
    if link[3] then
      redis.call('HSET', p .. 'flow_outbox', id,
        cjson.encode({link[3], link[1], tonumber(link[2]), ok and 1 or 0, result or 'null'}))
      return
    end
    local parent = link[1]
    local pk = p .. 'job:' .. parent
    local prow = redis.call('HMGET', pk, 'state', 'flow_policy')
    if prow[1] ~= 'waiting' then return end
    local reason = emq_flow.count(p, parent, pk, prow[2], id, link[2], ok, result, force, now)
    if not reason then return end
    jk, id, ok, result = pk, parent, false, reason
  end
end

-- flow_ack: a child on another queue settled; counted at most once, fenced by the
-- parent being 'waiting' and by the SADD of `<queue>/<child>` into `flow:<parent>:acked`
-- (freed with the parent's results). 1 when counted, 0 for a repeat or a parent gone
function emq_flow.ack(p, parent, cq, child, index, ok, result, now)
  local pk = p .. 'job:' .. parent
  local prow = redis.call('HMGET', pk, 'state', 'flow_policy')
  if prow[1] ~= 'waiting' then return 0 end
  if redis.call('SADD', p .. 'flow:' .. parent .. ':acked', cq .. '/' .. child) == 0 then
    return 0
  end
  local reason = emq_flow.count(p, parent, pk, prow[2], child, index, ok, result, '0', now)
  if reason then emq_flow.settled(p, parent, false, reason, '0', now) end
  return 1
end

-- one row of a flow: a job like add's (pending), or a parent 'waiting' for the ids in kids
-- (with `limit`, the bytes its payload may grow to when the results are spliced in)
function emq_flow.write(p, scheduled, id, node, kids, now, limit)
  local name, body, priority, attempts, mode, policy =
    node[1], node[2], node[3], node[4], node[6], node[7]
  if mode == '' then
    emq_add_job(p, scheduled, id, body, 0, priority, attempts, nil, name, now, '', '', true)
    return
  end
  local jk = p .. 'job:' .. id
  local seq = redis.call('INCR', p .. 'seq')
  redis.call('HSET', jk, 'state', 'waiting', 'attempts', 0, 'stalled', 0,
    'payload', body, 'priority', priority, 'max_attempts', attempts, 'seq', seq,
    'created_at', now, 'flow_mode', mode, 'flow_policy', policy,
    'outstanding', #kids, 'flow_size', #kids, 'children', cjson.encode(kids))
  if limit then redis.call('HSET', jk, 'payload_limit', limit) end
  if name ~= '' then redis.call('HSET', jk, 'name', name) end
  redis.call('ZADD', p .. 'waiting', now, id)
end

-- flow_add's one node: a row like add's (pending, or 'waiting' for its children), with
-- its links. kids[n] lists the ids of node n's children, in order.
function emq_flow.add_node(p, scheduled, ids, kids, n, node, now, index, limit)
  local id = ids[n]
  emq_flow.write(p, scheduled, id, node, kids[n], now, limit)
  local ref = tonumber(node[5])
  if ref > 0 then
    redis.call('HSET', p .. 'job:' .. id, 'parent', ids[ref], 'flow_index', index)
  end
end

-- flow_add's node with its id given (a flow across queues, added one queue at a time):
-- node[9] its link, JSON [parent's queue ('' = this one), parent's id, index]; node[10]
-- its children's ids (JSON); node[11] the children on other queues, kept for a repair.
-- An id that exists is left alone, so the add may be sent again
function emq_flow.add_given(p, scheduled, node, now, limit)
  local id = node[8]
  local jk = p .. 'job:' .. id
  if redis.call('EXISTS', jk) == 1 then return end
  local kids = node[10] ~= '' and cjson.decode(node[10]) or {}
  emq_flow.write(p, scheduled, id, node, kids, now, limit)
  if node[9] ~= '' then
    local link = cjson.decode(node[9])
    redis.call('HSET', jk, 'parent', link[2], 'flow_index', link[3])
    if link[1] ~= '' then
      redis.call('HSET', jk, 'parent_queue', link[1])
      redis.call('HSET', p .. 'meta', 'xflows', '1') -- the worker's mark: drain my outbox
    end
  end
  if node[11] ~= '' then redis.call('HSET', jk, 'flow_remote', node[11]) end
end
