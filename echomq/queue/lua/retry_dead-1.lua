--[[ retry_dead: dead jobs back to pending, with fresh tries and their history kept.
  KEYS[1] dead
  ARGV[1] queue base   ARGV[2] mode: 'ids' (the ids follow) or 'oldest' (the dead
  set's oldest first)   ARGV[3] how many to take in 'oldest' mode (at most 1000)
  ARGV[4..] the ids in 'ids' mode (at most 1000)
  Returns: {moved, scanned}: how many went back to pending, and how many ids the
  call looked at (in 'oldest' mode a caller loops while scanned equals the count).
  Per id: a row not in state dead is skipped (in 'oldest' mode its stale entry leaves
  the dead set, so a loop always progresses). A dead row goes back to its priority/seq
  place (its lane when grouped): state pending, HINCRBY retried, last_error kept,
  finished_at and entry dropped (it has not finished now), stalled back to 0, and
  tries_base = attempts - released, so fail-3.lua counts its tries from zero again.
  `attempts`, the fencing token, never goes down: a zombie holder of an earlier
  attempt stays refused. Publishes {"event":"added"} when anything moved. ]]
local p = ARGV[1]
local ids
if ARGV[2] == 'oldest' then
  ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1)
else
  ids = {}
  for i = 4, #ARGV do ids[#ids + 1] = ARGV[i] end
end
local moved = 0
for _, id in ipairs(ids) do
  local jk = p .. 'job:' .. id
  local row = redis.call('HMGET', jk, 'state', 'attempts', 'released', 'priority', 'seq',
    'group')
  if row[1] == 'dead' then
    redis.call('ZREM', KEYS[1], id)
    local base = tonumber(row[2] or '0') - tonumber(row[3] or '0')
    redis.call('HSET', jk, 'state', 'pending', 'stalled', 0, 'tries_base', base)
    redis.call('HDEL', jk, 'finished_at', 'entry')
    redis.call('HINCRBY', jk, 'retried', 1)
    emq_make_pending(p, id, emq_score(row[4] or '0', row[5] or '0'), row[6])
    moved = moved + 1
  elseif ARGV[2] == 'oldest' then
    redis.call('ZREM', KEYS[1], id)
  end
end
if moved > 0 then redis.call('PUBLISH', p .. 'events', '{"event":"added"}') end
return {moved, #ids}
