--[[ The dashboard's charts over time, kept by the settling calls in the same atomic call
  (echomq.queue.charts reads them; docs/dashboard.md).
  The settle scripts already keep lifetime counters and histograms per queue (emq_observe,
  `metrics:finished`, `metrics:run`, `metrics:wait`, _lib.lua). A chart's point is the
  difference of those between two moments, so the charts keep SNAPSHOTS of them: the
  first settling call of each minute, before it counts anything, copies them (and the
  pending backlog) into `chart:m:<minute>` (minute = server ms // 60000) and, when they
  are not there yet, into `chart:q:<quarter>` (15 minutes) and `chart:h:<slot>` (2 hours).
  A snapshot is then the counters at the START of its minute (nothing settled in it
  before), of its quarter, of its 2 hours; a point is the next point's snapshot less its
  own. So every other settling call pays ONE GET (`chart:tip`, the minute of the last
  snapshot) and nothing per job, and the charts' resolution is the Prometheus buckets'.
  A snapshot is one string of space-separated pairs: `p <backlog>` then `f:<outcome> <n>`,
  `r:<bucket> <n>`, `w:<bucket> <n>` (bucket: the upper bound in ms, 'inf', 'sum',
  'count'), written once (SET NX: a clock stepped back never rewrites one).
  Expiry by age (PXAT from the bucket's start): minutes MINUTE_KEEP, the rest KEEP.
  One name is visible to the scripts (Lua's 200-local limit is shared). ]]
local emq_chart_tick
do
  local MINUTE_MS = 60000
  local MINUTE_KEEP = 7200000              -- two hours: the hour view, with room
  local KEEP = 8 * 86400000                -- the week view, with a day of room
  local SOURCES = {'finished', 'run', 'wait'}
  local TAGS = {'f:', 'r:', 'w:'}

  local function snapshot(p)
    local parts = {'p', redis.call('ZCARD', p .. 'pending')}
    for i, name in ipairs(SOURCES) do
      local h = redis.call('HGETALL', p .. 'metrics:' .. name)
      for j = 1, #h, 2 do
        parts[#parts + 1] = TAGS[i] .. h[j]
        parts[#parts + 1] = h[j + 1]
      end
    end
    return table.concat(parts, ' ')
  end

  -- The hook of every settling call, BEFORE it counts its outcomes: the first call of a
  -- minute snapshots the counters (once a minute; every other call: one GET).
  function emq_chart_tick(p, now)
    local m = math.floor(now / MINUTE_MS)
    local tip = p .. 'chart:tip'
    if tonumber(redis.call('GET', tip)) == m then return end
    local snap = snapshot(p)
    local q, s = math.floor(m / 15), math.floor(m / 120)
    redis.call('SET', p .. 'chart:m:' .. m, snap, 'NX', 'PXAT', m * MINUTE_MS + MINUTE_KEEP)
    redis.call('SET', p .. 'chart:q:' .. q, snap, 'NX', 'PXAT', q * 900000 + KEEP)
    redis.call('SET', p .. 'chart:h:' .. s, snap, 'NX', 'PXAT', s * 7200000 + KEEP)
    redis.call('SET', tip, m, 'PXAT', m * MINUTE_MS + KEEP)
  end
end
