--[[ The dashboard's charts: per-minute buckets written by the settling calls, in the same
  atomic call as the settle (echomq.queue.charts reads them; docs/dashboard.md).
  One hash per queue per minute, `chart:m:<minute>` (minute = server ms // 60000), with:
    c completed   x cancelled   f failed and retried   d dead   (settled attempts)
    p the pending backlog (ZCARD pending) at the minute's last settle
    r<b> / w<b> run / wait times (ms) of the attempts settled in the minute, a histogram
      over log buckets: b = 0 for under 1 ms, else floor(2 * log2(ms)) + 1, so bucket b
      holds [2^((b-1)/2), 2^(b/2)) ms: a quantile read from it is within ~19%
  The coarser levels `chart:q:<quarter>` (15 minutes) and `chart:h:<slot>` (2 hours) hold
  the same fields, summed (p: the last sample). A minute is folded into them ONCE, by the
  first settle of a later minute (the minute it meets in `chart:tip`), so a settling call
  writes one hash whatever the levels: a few HINCRBY per call, batched as
  emq_observe_flush is (one per outcome and per distinct time bucket, not per job).
  Expiry by age (PEXPIREAT from the bucket's start): a folded minute lives
  EMQ_CHART_MINUTE_KEEP, the coarse levels and the unfolded tip EMQ_CHART_KEEP.
  Only one name is visible to the scripts (Lua's 200-local limit is shared). ]]
local emq_chart_settled
do
  local MINUTE_MS = 60000
  local MINUTE_KEEP = 86400000 + 3600000   -- a day and an hour: the hour view, with room
  local KEEP = 8 * 86400000                -- the week view, with a day of room
  local FIELD = {completed = 'c', cancelled = 'x', retried = 'f', dead = 'd'}
  local HALF_LOG2 = 2.8853900817779268   -- 2 / ln 2 (no math library at load time)

  local function bucket(ms)
    if ms < 1 then return 0 end
    return math.floor(math.log(ms) * HALF_LOG2) + 1
  end

  -- fold minute `m`'s hash into its quarter and its 2-hour hash, then let it expire
  local function fold(p, m)
    local mk = p .. 'chart:m:' .. m
    local h = redis.call('HGETALL', mk)
    if #h == 0 then return end
    local start = m * MINUTE_MS
    local qk = p .. 'chart:q:' .. math.floor(m / 15)
    local hk = p .. 'chart:h:' .. math.floor(m / 120)
    for i = 1, #h, 2 do
      if h[i] == 'p' then
        redis.call('HSET', qk, 'p', h[i + 1])
        redis.call('HSET', hk, 'p', h[i + 1])
      else
        redis.call('HINCRBY', qk, h[i], h[i + 1])
        redis.call('HINCRBY', hk, h[i], h[i + 1])
      end
    end
    redis.call('PEXPIREAT', qk, math.floor(m / 15) * 900000 + KEEP)
    redis.call('PEXPIREAT', hk, math.floor(m / 120) * 7200000 + KEEP)
    redis.call('PEXPIREAT', mk, start + MINUTE_KEEP)
  end

  -- a histogram of {bucket field = n} from the emq_observe accumulators (run, wait)
  local function times(run, wait)
    local now = run.now
    local r, w = {}, {}
    if not now then return r, w end
    for started, per in pairs(wait) do
      local s = tonumber(started)
      if s then
        local rb = 'r' .. bucket(now - s)
        for created, n in pairs(per) do
          r[rb] = (r[rb] or 0) + n
          local c = created and tonumber(created)
          if c then
            local wb = 'w' .. bucket(s - c)
            w[wb] = (w[wb] or 0) + n
          end
        end
      end
    end
    return r, w
  end

  -- The hook of every settling call, once per call: `tally` {outcome = n} (completed,
  -- cancelled, retried, dead), `run`/`wait` the call's emq_observe accumulators (or {}).
  function emq_chart_settled(p, now, tally, run, wait)
    local m = math.floor(now / MINUTE_MS)
    local mk = p .. 'chart:m:' .. m
    local backlog = redis.call('ZCARD', p .. 'pending')
    if redis.call('HSET', mk, 'p', backlog) == 1 then
      -- the minute's first settle: it lives until folded; the previous tip is folded
      redis.call('PEXPIREAT', mk, m * MINUTE_MS + KEEP)
      local tip = tonumber(redis.call('GET', p .. 'chart:tip'))
      if tip and tip ~= m then fold(p, tip) end
      redis.call('SET', p .. 'chart:tip', m, 'PXAT', m * MINUTE_MS + KEEP)
    end
    for outcome, n in pairs(tally) do
      redis.call('HINCRBY', mk, FIELD[outcome], n)
    end
    local r, w = times(run, wait)
    for field, n in pairs(r) do redis.call('HINCRBY', mk, field, n) end
    for field, n in pairs(w) do redis.call('HINCRBY', mk, field, n) end
  end
end
