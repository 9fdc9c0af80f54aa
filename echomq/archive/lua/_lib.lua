--[[ Shared helpers of the archive's scripts, prepended to each one.
  Nothing here writes unless called. ]]

-- custody of a declared stream, checked before the fold touches the queue: the caller
-- holds the fold lease (else -1), the stream is declared (else -2), and the archive this
-- driver writes is the stream's archive of record; a declaration that names none is
-- claimed for `mine` when `claim` is '1', and refused otherwise (else -3: a floor-only
-- driver never takes the record by trimming first). `also` is another archive the
-- driver writes ('' = none). Returns 0 when the caller may go on.
local function emq_fold_custody(lease_key, token, meta_key, mine, also, claim)
  if redis.call('GET', lease_key) ~= token then return -1 end
  if redis.call('HGET', meta_key, 'stream') ~= '1' then return -2 end
  local record = redis.call('HGET', meta_key, 'archive')
  if record == false then
    if claim ~= '1' then return -3 end
    redis.call('HSET', meta_key, 'archive', mine)
  elseif record ~= mine and (also == '' or record ~= also) then
    return -3
  end
  return 0
end
