--[[ progress: a held job reports how far it got: stored on its row, told to listeners.
  KEYS[1] active   KEYS[2] the job row
  ARGV[1] id   ARGV[2] token (the attempts the holder claimed with)
  ARGV[3] the progress as JSON   ARGV[4] the job-events channel   ARGV[5] the message
  Returns, checked in the seed's order (no write unless all pass):
    1 stored and published   -1 no such row   -2 stale token   -3 not in active
  One HSET and one PUBLISH: the message is built by the caller, nothing is read back. ]]
local att = redis.call('HGET', KEYS[2], 'attempts')
if not att then return -1 end
if att ~= ARGV[2] then return -2 end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return -3 end
redis.call('HSET', KEYS[2], 'progress', ARGV[3])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
