--[[ obliterate_keys: delete a batch of a marked queue's keys (found by SCAN on its base).
  KEYS[1] meta
  ARGV[1] queue base   ARGV[2..] the keys (at most 1000), each under the base
  Returns: how many keys were deleted (the meta hash is never deleted here: it keeps the
    queue marked until obliterate_end)
    -1  the queue is not marked (never begun, or another obliterate already ended it)
  UNLINK: a large set, stream or hash is freed off the main thread.
  'ERR EMQ.OBLITERATE key outside the queue' when a key does not start with the base:
  nothing is deleted. ]]
if redis.call('HGET', KEYS[1], 'obliterating') ~= '1' then return -1 end
local p = ARGV[1]
local doomed = {}
for i = 2, #ARGV do
  local k = ARGV[i]
  if string.sub(k, 1, #p) ~= p then
    return redis.error_reply('ERR EMQ.OBLITERATE key outside the queue')
  end
  if k ~= KEYS[1] then doomed[#doomed + 1] = k end
end
if #doomed == 0 then return 0 end
return redis.call('UNLINK', unpack(doomed))
