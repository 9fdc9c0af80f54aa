--[[ flow_add: a chain, group or chord's jobs, added in one call (helpers: _lib_flow.lua).
  KEYS[1] pending   KEYS[2] scheduled
  ARGV[1] queue base (emq:{q}:)
  ARGV[2] the adding client's payload limit in bytes, kept on each parent row: a release
    whose spliced payload would pass it dead-letters the parent instead (emq_flow.release;
    '' = none, as a row from before it has none)
  ARGV[3..] nodes of 11: name, payload JSON, priority, max_attempts, parent (the 1-based
    index of the node that waits for this one; 0 = none; always a later node), mode (''
    = a job that is pending at once; 'chain' or 'chord' = a parent, 'waiting' for the
    nodes naming it), on_child_failure ('fail' or 'ignore'; '' for a job), then id, link,
    children, remote: '' (the id generated, links by index) or, for a flow across
    queues, the id given and the links explicit (emq_flow.add_given: an id that exists
    is left alone, so a repair may send the node again)
  Returns: the ids, one per node, in order.
  The queue's meta gets `flows` = '1' (the settle hooks' mark). An add into an empty
  queue publishes `added`.
  'EMQBUSY queue is being obliterated' while obliterate removes the queue: nothing added. ]]
local p = ARGV[1]
local limit = emq_posint(ARGV[2])
if redis.call('HGET', p .. 'meta', 'obliterating') == '1' then
  return redis.error_reply('EMQBUSY queue is being obliterated')
end
local now = emq_now()
local pending_was_empty = redis.call('ZCARD', KEYS[1]) == 0
local nodes, ids, kids, index = {}, {}, {}, {}
for i = 3, #ARGV, 11 do
  local n = #nodes + 1
  nodes[n] = {unpack(ARGV, i, i + 10)}
  local id = nodes[n][8]
  if id == '' then
    repeat
      id = tostring(redis.call('INCR', p .. 'id'))
    until redis.call('EXISTS', p .. 'job:' .. id) == 0
  end
  ids[n] = id
  kids[n] = {}
end
for n, node in ipairs(nodes) do
  local ref = tonumber(node[5])
  if ref > 0 then
    local list = kids[ref]
    list[#list + 1] = ids[n]
    index[n] = #list
  end
end
for n, node in ipairs(nodes) do
  if node[8] == '' then
    emq_flow.add_node(p, KEYS[2], ids, kids, n, node, now, index[n] or 0, limit)
  else
    emq_flow.add_given(p, KEYS[2], node, now, limit)
  end
end
redis.call('HSET', p .. 'meta', 'flows', '1')
if pending_was_empty then redis.call('PUBLISH', p .. 'events', '{"event":"added"}') end
return ids
