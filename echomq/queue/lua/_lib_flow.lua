--[[ Flows (chain, group, chord): the helpers of flow_add-2.lua and of the settle hooks
  in complete-2.lua, fail-3.lua and stalled_check-3.lua. One table, `emq_flow`, so the
  concatenated library spends one local on them.
  A parent row waits in state 'waiting' (listed in the `waiting` set) with `outstanding`
  (its children not yet settled for good), `flow_mode` ('chain': one child, its result
  becomes the first argument; 'chord': the children's results, a list in their order,
  become it), `flow_policy` ('fail' or 'ignore') and `children` (a JSON array of ids).
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
-- freed, it turns pending (and wakes the consumers)
function emq_flow.release(p, parent, pk)
  local row = redis.call('HMGET', pk, 'payload', 'flow_mode', 'flow_size', 'priority', 'seq')
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
  redis.call('DEL', rk)
  redis.call('ZREM', p .. 'waiting', parent)
  redis.call('HSET', pk, 'state', 'pending', 'payload', payload, 'outstanding', 0)
  emq_make_pending(p, parent, emq_score(row[4], row[5]), nil)
  redis.call('PUBLISH', p .. 'events', '{"event":"added"}')
end

-- a waiting parent removed (remove_job): out of `waiting`, its results freed
function emq_flow.forget(p, parent)
  redis.call('ZREM', p .. 'waiting', parent)
  redis.call('DEL', p .. 'flow:' .. parent)
end

-- a parent dead-lettered for a child's failure (on_child_failure="fail"); recorded like
-- any dead job, its `children` with it
function emq_flow.kill(p, parent, pk, reason, force, now)
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

-- a job settled for good (completed: ok with its result JSON; dead or cancelled: not ok,
-- `why` says how): counted once on its waiting parent, which is released by its last
-- child or, under 'fail', dead-lettered by its first failed one (and so on up a chain)
function emq_flow.settled(p, id, ok, result, force, now)
  local jk = p .. 'job:' .. id
  while true do
    local link = redis.call('HMGET', jk, 'parent', 'flow_index')
    if not link[1] or redis.call('HSETNX', jk, 'flow_counted', '1') == 0 then return end
    local parent = link[1]
    local pk = p .. 'job:' .. parent
    local prow = redis.call('HMGET', pk, 'state', 'flow_policy')
    if prow[1] ~= 'waiting' then return end
    if ok or prow[2] == 'ignore' then
      redis.call('HSET', p .. 'flow:' .. parent, link[2], ok and result or 'null')
      if redis.call('HINCRBY', pk, 'outstanding', -1) <= 0 then
        emq_flow.release(p, parent, pk)
      end
      return
    end
    local reason = 'child ' .. id .. ' failed: ' .. string.sub(result, 1, 500)
    emq_flow.kill(p, parent, pk, reason, force, now)
    jk, id, ok, result = pk, parent, false, reason
  end
end

-- flow_add's one node: a row like add's (pending, or 'waiting' for its children), with
-- its links. kids[n] lists the ids of node n's children, in order.
function emq_flow.add_node(p, scheduled, ids, kids, n, node, now, index)
  local id = ids[n]
  local name, body, priority, attempts, ref, mode, policy =
    node[1], node[2], node[3], node[4], tonumber(node[5]), node[6], node[7]
  if mode == '' then
    emq_add_job(p, scheduled, id, body, 0, priority, attempts, nil, name, now, '', '', true)
  else
    local jk = p .. 'job:' .. id
    local seq = redis.call('INCR', p .. 'seq')
    redis.call('HSET', jk, 'state', 'waiting', 'attempts', 0, 'stalled', 0,
      'payload', body, 'priority', priority, 'max_attempts', attempts, 'seq', seq,
      'created_at', now, 'flow_mode', mode, 'flow_policy', policy,
      'outstanding', #kids[n], 'flow_size', #kids[n], 'children', cjson.encode(kids[n]))
    if name ~= '' then redis.call('HSET', jk, 'name', name) end
    redis.call('ZADD', p .. 'waiting', now, id)
  end
  if ref > 0 then
    redis.call('HSET', p .. 'job:' .. id, 'parent', ids[ref], 'flow_index', index)
  end
end
