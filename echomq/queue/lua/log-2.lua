--[[ log: a held job appends one line to its row's log, fenced like progress.
  KEYS[1] active   KEYS[2] the job row
  ARGV[1] id   ARGV[2] token (the attempts the holder claimed with)   ARGV[3] the text
  Returns, checked in the seed's order (no write unless all pass):
    1 appended   -1 no such row   -2 stale token   -3 not in active
  The line {"at": server ms, "attempt": token, "text": text} goes to the end of the row's
  `logs` (a JSON array); the last 100 lines and 64 KiB of array text are kept, the oldest
  dropped first (the newest is always kept). A recorded outcome carries them into the
  outcome stream (emq_record, _lib.lua). ]]
local att = redis.call('HGET', KEYS[2], 'attempts')
if not att then return -1 end
if att ~= ARGV[2] then return -2 end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return -3 end
local line = cjson.encode({at = emq_now(), attempt = tonumber(ARGV[2]), text = ARGV[3]})
emq_json_append(KEYS[2], 'logs', line, 100, 65536)
return 1
