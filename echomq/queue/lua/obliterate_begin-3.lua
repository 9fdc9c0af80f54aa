--[[ obliterate_begin: check that a queue may go, then mark it: paused (claim hands out
  nothing) and obliterating (add refuses, obliterate_keys may delete its keys).
  KEYS[1] meta   KEYS[2] active   KEYS[3] completions (the outcome stream)
  ARGV[1] '1' = force: skip both checks
  Returns: {code, count}
     1  marked (count 0)
    -1  jobs are active: count is how many (nothing changed)
    -2  the stream is declared and still holds count entries the archive has not
        folded and trimmed (nothing changed)
  Marking an already marked queue marks it again: an interrupted obliterate resumes. ]]
local code = 1
local count = 0
if ARGV[1] ~= '1' then
  local active = redis.call('ZCARD', KEYS[2])
  local waiting = 0
  if redis.call('HGET', KEYS[1], 'stream') == '1' then waiting = redis.call('XLEN', KEYS[3]) end
  if active > 0 then
    code = -1
    count = active
  elseif waiting > 0 then
    code = -2
    count = waiting
  end
end
if code == 1 then redis.call('HSET', KEYS[1], 'paused', '1', 'obliterating', '1') end
return {code, count}
