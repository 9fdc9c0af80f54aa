--[[ search_page: one page of a search, filtered where the rows are (read only).
  KEYS[1] the state's set the ids were paged from (names the queue's slot; not read)
  ARGV[1] queue base   ARGV[2] name holds ('' any)   ARGV[3] payload holds ('' any)
  ARGV[4] the same text JSON-escaped, as stored ('' none)   ARGV[5] time field
  ('created_at', 'finished_at' or '' none)   ARGV[6] since ms ('' none)
  ARGV[7] until ms, exclusive ('' none)   ARGV[8] most matches   ARGV[9] payload
  characters returned per match ('' all, '0' none)   ARGV[10..] the ids, in page order
  (at most 1000)
  Returns: {scanned, row, row, ...}: how many ids were examined (it stops at the
  most-th match) and each match as {id, name, state, created_at, finished_at, attempts,
  payload}, a missing field nil (the payload cut to ARGV[9] characters). A row gone since the page
  was read is skipped. Reads one HMGET per id, writes nothing. ]]
local p, name, needle, escaped = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local field = ARGV[5]
local since, till = tonumber(ARGV[6]), tonumber(ARGV[7])
local most = tonumber(ARGV[8])
local chars = tonumber(ARGV[9])
local out = {0}
local found = 0
for i = 10, #ARGV do
  local id = ARGV[i]
  out[1] = out[1] + 1
  local row = redis.call('HMGET', p .. 'job:' .. id, 'name', 'state', 'created_at',
    'finished_at', 'attempts', 'payload')
  local ok = row[2] ~= false
  if ok and name ~= '' then ok = row[1] ~= false and string.find(row[1], name, 1, true) ~= nil end
  if ok and field ~= '' and (since or till) then
    local at = tonumber(field == 'created_at' and row[3] or row[4])
    ok = at ~= nil and (since == nil or at >= since) and (till == nil or at < till)
  end
  if ok and needle ~= '' then
    ok = row[6] ~= false and (string.find(row[6], needle, 1, true) ~= nil
      or (escaped ~= '' and string.find(row[6], escaped, 1, true) ~= nil))
  end
  if ok then
    local payload = row[6]
    if payload and chars then
      payload = chars > 0 and string.sub(payload, 1, chars) or false
    end
    out[#out + 1] = {id, row[1], row[2], row[3], row[4], row[5], payload}
    found = found + 1
    if found >= most then break end
  end
end
return out
