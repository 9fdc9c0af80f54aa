--[[ reap: every lapsed lease back to pending once, with no count (crash recovery).
  KEYS[1] active   KEYS[2] pending
  ARGV[1] queue base   ARGV[2] limit (ids per call)
  Returns: the ids returned to pending (or to their lane). An active id with no
  row is only removed from active and not listed. ]]
local p = ARGV[1]
local now = emq_now()
local exp = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local back = {}
for _, id in ipairs(exp) do
  redis.call('ZREM', KEYS[1], id)
  local jk = p .. 'job:' .. id
  if redis.call('EXISTS', jk) == 1 then
    local g = redis.call('HGET', jk, 'group')
    if g then emq_release_slot(p, g) end
    redis.call('HSET', jk, 'state', 'pending')
    emq_make_pending(p, id, 0, g)
    back[#back + 1] = id
  end
end
return back
