--[[ Rate limits: how many jobs may START per window, per queue and per group.
  Keys (all under the queue's base, so one slot):
  `rate`, a hash: the limits (`queue` = 'max:per_ms' for the whole queue, `g:<group>`
    for a group), how many group limits there are (`groups`), the queue's wait a handler
    asked for (`until`, server ms: echomq.RateLimited) and when the first parked group
    opens (`parked`). claim reads these four fields in ONE HMGET and nothing more when
    none is set: the cost of a queue without limits.
  `rlog`, `rlog:<group>`, the start logs (sorted sets): one member per claim call that
    started jobs ('<first id>:<its token>:<how many>', unique since a token is), scored
    by the call's server ms, and the member '#' scored by how many starts the others
    stand for (at most 100000: below every time, so it sorts first and no trim takes it).
    A claim reads the expired members and the count in one ZRANGEBYSCORE and writes its
    member and the new count in one ZADD: one member per log per call, never one per job.
  `rparked`, the groups out of the ring until their window opens (score: when, server ms).
  Each log is a sliding window: over ANY per_ms no more than max_jobs claims start. ]]

-- the helpers sit in one table (one local of the 200 a Lua chunk may have: the functions
-- library holds every _lib*.lua); the bounds are Python's gates' too (queue/rate_limits.py)
local emq_rate = {MAX_JOBS = 100000, MAX_MS = 86400000}

-- 'max:per' as two numbers (nil for anything else)
function emq_rate.parse(text)
  if not text then return nil end
  local max, per = string.match(text, '^(%d+):(%d+)$')
  if not max then return nil end
  return tonumber(max), tonumber(per)
end

-- how many starts a log member stands for
function emq_rate.k(member)
  return tonumber(string.match(member, ':(%d+)$')) or 1
end

-- a log's starts within the window ending now: its count less what the members that
-- left the window stood for (those are removed; the count is the caller's to write,
-- and the second answer says whether it changed)
function emq_rate.trim(log, now, per)
  local old = redis.call('ZRANGEBYSCORE', log, '-inf', now - per, 'WITHSCORES')
  local n, gone = 0, false
  for i = 1, #old, 2 do
    if old[i] == '#' then
      n = n + tonumber(old[i + 1])
    else
      n = n - emq_rate.k(old[i])
      gone = true
    end
  end
  if gone then redis.call('ZREMRANGEBYSCORE', log, '(' .. emq_rate.MAX_JOBS, now - per) end
  if n < 0 then n = 0 end
  return n, gone
end

-- append one claim's starts to a log (`k` of them, the first `member`), with its count
function emq_rate.log(log, now, member, k, n)
  redis.call('ZADD', log, now, member .. ':' .. k, n + k, '#')
end

-- when a log of `n` starts (plus `extra` taken at `now` in this call) is back below
-- `max`: the time the member whose leaving brings it there entered, plus per
function emq_rate.opens(log, n, extra, max, per, now)
  local over, start = n + extra - max, 1  -- index 0 is the count, '#'
  while true do
    local page = redis.call('ZRANGE', log, start, start + 15, 'WITHSCORES')
    if #page == 0 then return now + per end
    for i = 1, #page, 2 do
      over = over - emq_rate.k(page[i])
      if over < 0 then return tonumber(page[i + 1]) + per end
    end
    start = start + 16
  end
end

-- after `rparked` changed: the hash's `parked` follows its first member (or goes)
function emq_rate.reparked(p)
  local first = redis.call('ZRANGE', p .. 'rparked', 0, 0, 'WITHSCORES')
  if first[2] then
    redis.call('HSET', p .. 'rate', 'parked', first[2])
    return tonumber(first[2])
  end
  redis.call('HDEL', p .. 'rate', 'parked')
  return nil
end

-- claim's entry hook. nil when the queue has no limit, no wait and no parked group (one
-- HMGET). Else the call's state: `wait` (ms) when the queue hands out nothing now;
-- `room`, how many it may start in this call (at most `count`). Groups whose window
-- opened rejoin the ring.
function emq_rate.open(p, now, count)
  local row = redis.call('HMGET', p .. 'rate', 'queue', 'until', 'parked', 'groups')
  if not (row[1] or row[2] or row[3] or row[4]) then return nil end
  local rl = {room = count, groups = {}, took = {}, parked = tonumber(row[3])}
  if rl.parked and rl.parked <= now then
    local due = redis.call('ZRANGEBYSCORE', p .. 'rparked', '-inf', now, 'LIMIT', 0, 1000)
    for _, g in ipairs(due) do
      redis.call('ZREM', p .. 'rparked', g)
      emq_ring_offer(p, g)
    end
    rl.parked = emq_rate.reparked(p)
  end
  rl.parked_was = rl.parked
  if row[2] then
    local wait = tonumber(row[2]) - now
    if wait > 0 then
      rl.wait = wait
      return rl
    end
    redis.call('HDEL', p .. 'rate', 'until')
  end
  local max, per = emq_rate.parse(row[1])
  if max then
    local log = p .. 'rlog'
    local n, gone = emq_rate.trim(log, now, per)
    rl.queue_gone = gone
    if n >= max then
      redis.call('ZADD', log, n, '#')
      rl.wait = emq_rate.opens(log, n, 0, max, per, now) - now
      return rl
    end
    rl.room = math.min(count, max - n)
    rl.queue = n
  end
  return rl
end

-- claim's ring hook: true when group `g` may start nothing now (parked by a handler's
-- wait, or its window is full: then parked until it opens). The caller popped it from
-- the ring; a parked group comes back through emq_rate.open.
function emq_rate.skip(p, rl, g, now)
  if rl.parked_was then
    local parked = redis.call('ZSCORE', p .. 'rparked', g)
    if parked and tonumber(parked) > now then return true end
  end
  local seen = rl.groups[g]
  if seen == nil then
    local max, per = emq_rate.parse(redis.call('HGET', p .. 'rate', 'g:' .. g))
    seen = false
    if max then
      local n, gone = emq_rate.trim(p .. 'rlog:' .. g, now, per)
      seen = {max = max, per = per, n = n, gone = gone}
    end
    rl.groups[g] = seen
  end
  if not seen then return false end
  local took = rl.took[g]
  local extra = took and took.k or 0
  if seen.n + extra < seen.max then return false end
  local opens = emq_rate.opens(p .. 'rlog:' .. g, seen.n, extra, seen.max, seen.per, now)
  redis.call('ZADD', p .. 'rparked', opens, g)
  if not rl.parked or opens < rl.parked then rl.parked = opens end
  return true
end

-- claim's ring hook: job `id` of group `g` starts in this call
function emq_rate.took(rl, g, id)
  local took = rl.took[g]
  if took then
    took.k = took.k + 1
  else
    rl.took[g] = {k = 1, first = id}
  end
end

-- what every exit after emq_rate.open writes: the trimmed counts of limited groups that
-- started nothing, and `parked` when this call parked a group
function emq_rate.close(p, rl)
  for g, seen in pairs(rl.groups) do
    if seen and seen.gone and not rl.took[g] then
      redis.call('ZADD', p .. 'rlog:' .. g, seen.n, '#')
    end
  end
  if rl.parked ~= rl.parked_was then redis.call('HSET', p .. 'rate', 'parked', rl.parked) end
end

-- claim's hook when it found nothing: the wait until a parked group opens, else {}
function emq_rate.idle(p, rl, now)
  if rl.queue and rl.queue_gone then redis.call('ZADD', p .. 'rlog', rl.queue, '#') end
  emq_rate.close(p, rl)
  if rl.parked then return {-math.max(1, rl.parked - now)} end
  return {}
end

-- claim's exit hook: record this call's starts in the queue's log and the limited
-- groups' logs (one member each). `out` is claim's reply (the deadline, then id,
-- token, payload, name per job).
function emq_rate.started(p, rl, now, out)
  if rl.queue then emq_rate.log(p .. 'rlog', now, out[2] .. ':' .. out[3], (#out - 1) / 4,
    rl.queue) end
  local tokens = nil
  for g, took in pairs(rl.took) do
    local seen = rl.groups[g]
    if seen then
      if not tokens then
        tokens = {}
        for i = 2, #out, 4 do tokens[out[i]] = out[i + 1] end
      end
      emq_rate.log(p .. 'rlog:' .. g, now, took.first .. ':' .. tokens[took.first], took.k,
        seen.n)
    end
  end
  emq_rate.close(p, rl)
end
