--[[ release: hand held jobs back so another worker can take them at once
  (a graceful shutdown's give-back; not counted as a try against max_attempts).
  KEYS[1] active
  ARGV[1] queue base   ARGV[2..] pairs (id, token)
  Returns: one code per job: 1 handed back   -1 no such row   -2 stale   -3 not in active
  A handed-back job goes to the front (score 0), as a recovered one does. ]]
local p = ARGV[1]
local codes = {}
for i = 2, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local jk = p .. 'job:' .. id
  local row = redis.call('HMGET', jk, 'attempts', 'group')
  local code = 1
  if not row[1] then
    code = -1
  elseif row[1] ~= token then
    code = -2
  elseif not redis.call('ZSCORE', KEYS[1], id) then
    code = -3
  end
  if code == 1 then
    redis.call('ZREM', KEYS[1], id)
    redis.call('HINCRBY', jk, 'released', 1)
    redis.call('HSET', jk, 'state', 'pending')
    if row[2] then emq_release_slot(p, row[2]) end
    emq_make_pending(p, id, 0, row[2])
  end
  codes[#codes + 1] = code
end
return codes
