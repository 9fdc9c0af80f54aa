--[[ obliterate_end: the last key of an obliterated queue, its meta hash (and with it the
  marks: the name is free for a new queue).
  KEYS[1] meta
  Returns: 1 deleted a meta hash that held settings (a declaration, a pause)
    0 deleted a meta hash that held only the marks obliterate_begin wrote
    -1  the queue is not marked (another obliterate already ended it) ]]
if redis.call('HGET', KEYS[1], 'obliterating') ~= '1' then return -1 end
local extra = redis.call('HLEN', KEYS[1]) - 2
redis.call('DEL', KEYS[1])
if extra > 0 then return 1 end
return 0
