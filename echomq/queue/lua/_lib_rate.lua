--[[ Rate limits: how many jobs may START per window, per queue and per group.
  Keys (all under the queue's base, so one slot): `rate`, a hash of the limits
  (`queue` = 'max:per_ms' for the whole queue, `g:<group>` for a group) and of the
  queue's wait asked by a handler (`until`, server ms: echomq.RateLimited); `rlog` and
  `rlog:<group>`, the start logs (sorted sets: member '<id>:<token>', score the claim's
  server ms), trimmed to the last per_ms at each claim that reads them, so each holds at
  most max_jobs members and expires per_ms after its last start; `rparked`, the groups
  out of the ring until their window opens (score: when, server ms).
  A log is a sliding window: over ANY per_ms no more than max_jobs claims start. The
  claim reads nothing of this unless `rate` or `rparked` exists (one EXISTS). ]]

-- the bounds Python's gates hold too (echomq.queue.rate_limits)
local EMQ_RATE_MAX_JOBS = 100000
local EMQ_RATE_MAX_MS = 86400000

-- 'max:per' as two numbers (nil for anything else)
local function emq_rate_parse(text)
  if not text then return nil end
  local max, per = string.match(text, '^(%d+):(%d+)$')
  if not max then return nil end
  return tonumber(max), tonumber(per)
end

-- trim a log to the window ending now; how many starts it holds
local function emq_rate_trim(log, now, per)
  redis.call('ZREMRANGEBYSCORE', log, '-inf', now - per)
  return redis.call('ZCARD', log)
end

-- when a log of `n` starts (plus `extra` taken at `now` in this call) is back below
-- `max`: the start that must leave the window, plus per
local function emq_rate_opens(log, n, extra, max, per, now)
  local idx = n + extra - max
  if idx < n then
    local at = redis.call('ZRANGE', log, idx, idx, 'WITHSCORES')[2]
    if at then return tonumber(at) + per end
  end
  return now + per
end

-- claim's entry hook. nil when the queue has no limit and no wait (one EXISTS). Else
-- the call's state: `wait` (ms) when the queue hands out nothing now; `room`, how many
-- it may start in this call (at most `count`). Groups whose window opened rejoin the ring.
local function emq_rate_open(p, now, count)
  if redis.call('EXISTS', p .. 'rate', p .. 'rparked') == 0 then return nil end
  local rl = {room = count, groups = {}, took = {}}
  local due = redis.call('ZRANGEBYSCORE', p .. 'rparked', '-inf', now, 'LIMIT', 0, 1000)
  for _, g in ipairs(due) do
    redis.call('ZREM', p .. 'rparked', g)
    emq_ring_offer(p, g)
  end
  local row = redis.call('HMGET', p .. 'rate', 'queue', 'until')
  if row[2] then
    local wait = tonumber(row[2]) - now
    if wait > 0 then
      rl.wait = wait
      return rl
    end
    redis.call('HDEL', p .. 'rate', 'until')
  end
  local max, per = emq_rate_parse(row[1])
  if max then
    local log = p .. 'rlog'
    local n = emq_rate_trim(log, now, per)
    if n >= max then
      rl.wait = emq_rate_opens(log, n, 0, max, per, now) - now
      return rl
    end
    rl.room = math.min(count, max - n)
    rl.queue = per
  end
  return rl
end

-- claim's ring hook: true when group `g` may start nothing now (parked by a handler's
-- wait, or its window is full: then parked until it opens). The caller popped it from
-- the ring; a parked group comes back through emq_rate_open.
local function emq_rate_skip(p, rl, g, now)
  local parked = redis.call('ZSCORE', p .. 'rparked', g)
  if parked and tonumber(parked) > now then return true end
  local seen = rl.groups[g]
  if seen == nil then
    local max, per = emq_rate_parse(redis.call('HGET', p .. 'rate', 'g:' .. g))
    seen = false
    if max then
      seen = {max = max, per = per, n = emq_rate_trim(p .. 'rlog:' .. g, now, per)}
    end
    rl.groups[g] = seen
  end
  if not seen then return false end
  local took = rl.took[g]
  local extra = took and #took or 0
  if seen.n + extra < seen.max then return false end
  local opens = emq_rate_opens(p .. 'rlog:' .. g, seen.n, extra, seen.max, seen.per, now)
  redis.call('ZADD', p .. 'rparked', opens, g)
  return true
end

-- claim's ring hook: job `id` of group `g` starts in this call
local function emq_rate_took(rl, g, id)
  local took = rl.took[g]
  if not took then
    took = {}
    rl.took[g] = took
  end
  took[#took + 1] = id
end

-- claim's hook when it found nothing: the wait until a parked group opens, else {}
local function emq_rate_idle(p, now)
  local first = redis.call('ZRANGE', p .. 'rparked', 0, 0, 'WITHSCORES')
  if first[2] then return {-math.max(1, tonumber(first[2]) - now)} end
  return {}
end

-- append the starts of `ids` (with their tokens) to a log, which expires per ms later
local function emq_rate_log(log, now, per, ids, tokens)
  local scored = {}
  for _, id in ipairs(ids) do
    scored[#scored + 1] = now
    scored[#scored + 1] = id .. ':' .. tokens[id]
  end
  redis.call('ZADD', log, unpack(scored))
  redis.call('PEXPIRE', log, per)
end

-- claim's exit hook: record this call's starts in the queue's log and the limited
-- groups' logs. `out` is claim's reply (the deadline, then id, token, payload, name).
local function emq_rate_started(p, rl, now, out)
  local ids, tokens = {}, {}
  for i = 2, #out, 4 do
    ids[#ids + 1] = out[i]
    tokens[out[i]] = out[i + 1]
  end
  if rl.queue then emq_rate_log(p .. 'rlog', now, rl.queue, ids, tokens) end
  for g, took in pairs(rl.took) do
    local seen = rl.groups[g]
    if seen then emq_rate_log(p .. 'rlog:' .. g, now, seen.per, took, tokens) end
  end
end
