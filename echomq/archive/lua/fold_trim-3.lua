--[[ fold_trim: trim the archived head of a declared outcome stream, fenced by the lease
  and by the stream's archive of record.

  KEYS[1] the lease key (emq:{q}:archive-lease)
  KEYS[2] the outcome stream (emq:{q}:completions)
  KEYS[3] the queue's meta hash (emq:{q}:meta)
  ARGV[1] our token   ARGV[2] MINID: entries below it are in the floor (and remote)
  ARGV[3] lease length, ms (renewed on success)
  ARGV[4] the archive this driver writes (its remote, else its floor): claimed as the
          archive of record when the declaration names none and ARGV[6] is '1'
  ARGV[5] another archive this driver writes (its floor), or '' for none
  ARGV[6] '1': claim an unset archive of record; '0': never (nothing trimmed then)

  Replies:
    n >= 0  entries removed
   -1       lease lost: nothing trimmed
   -2       the stream is not declared: nothing trimmed
   -3       the archive of record is another one, or none and ARGV[6] is not '1':
            nothing trimmed
]]
local custody = emq_fold_custody(KEYS[1], ARGV[1], KEYS[3], ARGV[4], ARGV[5], ARGV[6])
if custody ~= 0 then return custody end
local removed = redis.call('XTRIM', KEYS[2], 'MINID', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return removed
