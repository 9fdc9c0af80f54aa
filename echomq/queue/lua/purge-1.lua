--[[ purge: forget finished jobs in Redis (their history stays in the archive).
  KEYS[1] the state set: completed or dead
  ARGV[1] queue base   ARGV[2] keep (the newest rows kept)   ARGV[3] limit (rows per call)
  Returns: how many rows were deleted by this call (call again while it equals limit).
  Oldest first: the sets are scored by finish time. Only rows still in that state go;
  an id whose row moved on (a dead job re-added by id) only leaves the set. ]]
local p = ARGV[1]
local keep = tonumber(ARGV[2])
local excess = redis.call('ZCARD', KEYS[1]) - keep
if excess <= 0 then return 0 end
local limit = tonumber(ARGV[3])
if excess > limit then excess = limit end
local state = string.match(KEYS[1], ':(%a+)$')
local ids = redis.call('ZRANGE', KEYS[1], 0, excess - 1)
for _, id in ipairs(ids) do
  local jk = p .. 'job:' .. id
  if redis.call('HGET', jk, 'state') == state then redis.call('DEL', jk) end
end
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, excess - 1)
return #ids
