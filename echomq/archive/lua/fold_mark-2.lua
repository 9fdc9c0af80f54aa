--[[ fold_mark: tell the queue how far its outcome stream is folded into the floor, so
  that retention may forget the rows whose outcomes the archive holds.

  KEYS[1] the lease key (emq:{q}:archive-lease)
  KEYS[2] the queue's meta hash (emq:{q}:meta): its `folded` field is the mark
  ARGV[1] our token   ARGV[2] the floor's checkpoint (the last stream id committed)
  ARGV[3] the archive this driver writes (its remote, else its floor): claimed as the
          archive of record when the declaration names none and ARGV[5] is '1', as
          fold_trim does
  ARGV[4] another archive this driver writes (its floor), or '' for none
  ARGV[5] '1': claim an unset archive of record; '0': never (nothing marked then)

  The mark never moves backwards: a checkpoint at or below it changes nothing.

  Replies:
    1   the mark moved to ARGV[2]
    0   the mark was already at or past ARGV[2]
   -1   lease lost: nothing marked
   -2   the stream is not declared: nothing marked
   -3   the archive of record is another one, or none and ARGV[5] is not '1':
        nothing marked
]]
local custody = emq_fold_custody(KEYS[1], ARGV[1], KEYS[2], ARGV[3], ARGV[4], ARGV[5])
if custody ~= 0 then return custody end
local function parse(id)
  local ms, seq = string.match(id or '', '^(%d+)-(%d+)$')
  if not ms then return nil end
  return tonumber(ms), tonumber(seq)
end
local new_ms, new_seq = parse(ARGV[2])
if not new_ms then
  return redis.error_reply('EMQ.FOLD_MARK checkpoint is not a stream id')
end
local old_ms, old_seq = parse(redis.call('HGET', KEYS[2], 'folded'))
if old_ms and (old_ms > new_ms or (old_ms == new_ms and old_seq >= new_seq)) then
  return 0
end
redis.call('HSET', KEYS[2], 'folded', ARGV[2])
return 1
