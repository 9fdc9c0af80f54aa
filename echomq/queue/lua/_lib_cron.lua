-- the latest fire times of a cron schedule, newest first (at most 10), kept in its
-- queue's schedule-fires hash under 'recent:<name>' (a schedule name holds no ':'), so
-- the dashboard links the jobs it enqueued (cron-<name>-<time>); at: the time as text
local function emq_cron_recent(fires, name, at)
  local field = 'recent:' .. name
  local kept = redis.call('HGET', fires, field)
  local out = at
  if kept then
    local n = 1
    for t in string.gmatch(kept, '[^,]+') do
      if n >= 10 then break end
      out = out .. ',' .. t
      n = n + 1
    end
  end
  redis.call('HSET', fires, field, out)
end
