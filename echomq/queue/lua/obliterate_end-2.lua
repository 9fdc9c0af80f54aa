--[[ obliterate_end: the last keys of an obliterated queue: its outbox (the verb delivered
  it just before: empty, so normally already gone) and its meta hash (and with it the
  marks: the name is free for a new queue).
  KEYS[1] meta   KEYS[2] flow_outbox
  Returns: 1 deleted a meta hash that held settings (a declaration, a pause)
    0 deleted a meta hash that held only the marks obliterate_begin wrote
    (plus 1 when an outbox was still there)
    -1  the queue is not marked (another obliterate already ended it) ]]
if redis.call('HGET', KEYS[1], 'obliterating') ~= '1' then return -1 end
local extra = redis.call('HLEN', KEYS[1]) - 2
redis.call('DEL', KEYS[1])
local outbox = redis.call('UNLINK', KEYS[2])
if extra > 0 then return 1 + outbox end
return outbox
