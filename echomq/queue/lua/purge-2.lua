--[[ purge: forget finished jobs in Redis, oldest first, never ahead of the archive.
  KEYS[1] the state set: completed or dead   KEYS[2] the queue's meta hash
  ARGV[1] queue base   ARGV[2] keep (the newest rows never forgotten)
  ARGV[3] limit (rows examined per call, at most 1000)
  ARGV[4] older than, ms (-1: any age): only rows that finished before server TIME - it
  ARGV[5] offset: the oldest candidates an earlier call of this purge passed over
  Returns {forgotten, passed, more, held}:
    forgotten  set members removed by this call (their rows deleted while still in this
               state; an id whose row moved on, e.g. re-added by id, only leaves the set)
    passed     candidates skipped and left in place (a score-0 row whose finished_at is
               too recent): the next call starts that many ranks further
    more       1 when candidates remain beyond this call's window
    held       >0 when the purge stopped at a row the archive has not folded yet: how
               many candidates stay for the archive (the caller stops)
  The candidates are the set's ranks below ZCARD - keep, and with ARGV[4] only those
  scored at or before the cutoff (the sets are scored by finish time). On a declared
  queue (meta `stream` = 1) a row goes only once its outcome entry is folded (row
  `entry` <= meta `folded`); the first row that is not stops the purge, since every
  newer outcome is later in the stream. ]]
local p = ARGV[1]
local keep = emq_posint(ARGV[2])
if ARGV[2] == '0' then keep = 0 end
local limit = emq_posint(ARGV[3])
if not keep or not limit or keep > EMQ_MAX_INT or limit > 1000 then
  return redis.error_reply('EMQ.PURGE keep must be a count and limit 1..1000')
end
local older = tonumber(ARGV[4])
local offset = tonumber(ARGV[5]) or 0
local cutoff = -1
if older and older >= 0 then cutoff = emq_now() - older end
local state = string.match(KEYS[1], ':(%a+)$')
local last = redis.call('ZCARD', KEYS[1]) - keep - 1
if cutoff >= 0 then
  local old = redis.call('ZCOUNT', KEYS[1], '-inf', cutoff)
  if old - 1 < last then last = old - 1 end
end
if last < offset then return {0, 0, 0, 0} end
local stop = offset + limit - 1
if stop > last then stop = last end
local ids = redis.call('ZRANGE', KEYS[1], offset, stop, 'WITHSCORES')
local declared, folded = emq_fold_mark(KEYS[2])
local gone, passed, held = {}, 0, 0
for i = 1, #ids, 2 do
  local id, score = ids[i], tonumber(ids[i + 1])
  local jk = p .. 'job:' .. id
  local row = redis.call('HMGET', jk, 'state', 'entry', 'finished_at')
  if row[1] ~= state then
    gone[#gone + 1] = id
  elseif score == 0 and cutoff >= 0 and (tonumber(row[3]) or 0) > cutoff then
    passed = passed + 1  -- an old row scored 0: its finished_at says it is recent
  elseif not emq_forgettable(declared, folded, row[2]) then
    held = last - (offset + (i - 1) / 2) + 1
    break
  else
    redis.call('DEL', jk)
    gone[#gone + 1] = id
  end
end
if #gone > 0 then redis.call('ZREM', KEYS[1], unpack(gone)) end
local more = 0
if held == 0 and stop < last then more = 1 end
return {#gone, passed, more, held}
