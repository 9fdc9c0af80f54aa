--[[ The dashboard's charts: per-minute buckets written by the settling calls, in the same
  atomic call as the settle (echomq.queue.charts reads them; docs/dashboard.md).
  One hash per queue per minute, `chart:m:<minute>` (minute = server ms // 60000). Its
  fields count settled attempts by outcome (c completed, x cancelled, f failed and
  retried, d dead) and, when the attempt has them, by its run and wait time buckets at
  once: `<o><rb>.<wb>` (`c12.7`: completed, run bucket 12, wait bucket 7; `c12.` with no
  wait time), so that a settling call costs ONE HINCRBY per distinct (outcome, run, wait)
  of the call (one for a single job; a batch claimed and added together shares them);
  `<o>` alone counts attempts with no times (a cancel of a waiting job, a stalled
  dead-letter), `t<rb>.<wb>` times of a call that mixed outcomes (counted in `<o>`).
  A time bucket b is 0 under 1 ms, else floor(2 * log2(ms)) + 1: bucket b holds
  [2^((b-1)/2), 2^(b/2)) ms, so a quantile read from it is within ~19%.
  `p` is the pending backlog (ZCARD pending) sampled when the minute meets a new field.
  The coarser levels `chart:q:<quarter>` (15 minutes) and `chart:h:<slot>` (2 hours) hold
  the outcome counts, one histogram per time (`r<b>`, `w<b>`) and `p` (the last sample).
  A minute is folded into them ONCE, by the first settle of a later minute (the minute it
  finds in `chart:tip`): the coarse levels cost nothing per settle.
  Expiry by age (PEXPIREAT from the bucket's start): a folded minute lives
  MINUTE_KEEP, the coarse levels and the unfolded tip KEEP.
  Only one name is visible to the scripts (Lua's 200-local limit is shared). ]]
local emq_chart_settled
do
  local MINUTE_MS = 60000
  local MINUTE_KEEP = 86400000 + 3600000   -- a day and an hour: the hour view, with room
  local KEEP = 8 * 86400000                -- the week view, with a day of room
  local FIELD = {completed = 'c', cancelled = 'x', retried = 'f', dead = 'd'}
  local HALF_LOG2 = 2.8853900817779268     -- 2 / ln 2 (no math library at load time)

  local function bucket(ms)
    if ms < 1 then return 0 end
    return math.floor(math.log(ms) * HALF_LOG2) + 1
  end

  -- fold minute `m`'s hash into its quarter and its 2-hour hash, then let it expire
  local function fold(p, m)
    local mk = p .. 'chart:m:' .. m
    local h = redis.call('HGETALL', mk)
    if #h == 0 then return end
    local sums, backlog = {}, nil
    for i = 1, #h, 2 do
      local f, n = h[i], tonumber(h[i + 1]) or 0
      if f == 'p' then
        backlog = h[i + 1]
      else
        local o, rb, wb = string.match(f, '^([cxfdt])(%d*)%.?(%d*)$')
        if o then
          if o ~= 't' then sums[o] = (sums[o] or 0) + n end
          if rb ~= '' then sums['r' .. rb] = (sums['r' .. rb] or 0) + n end
          if wb ~= '' then sums['w' .. wb] = (sums['w' .. wb] or 0) + n end
        end
      end
    end
    local q, s = math.floor(m / 15), math.floor(m / 120)
    for _, key in ipairs({p .. 'chart:q:' .. q, p .. 'chart:h:' .. s}) do
      for f, n in pairs(sums) do redis.call('HINCRBY', key, f, n) end
      if backlog then redis.call('HSET', key, 'p', backlog) end
    end
    redis.call('PEXPIREAT', p .. 'chart:q:' .. q, q * 900000 + KEEP)
    redis.call('PEXPIREAT', p .. 'chart:h:' .. s, s * 7200000 + KEEP)
    redis.call('PEXPIREAT', mk, m * MINUTE_MS + MINUTE_KEEP)
  end

  -- a field new in minute `m`: sample the backlog, set the expiry, fold the previous tip
  local function met(p, m, mk)
    redis.call('HSET', mk, 'p', redis.call('ZCARD', p .. 'pending'))
    redis.call('PEXPIREAT', mk, m * MINUTE_MS + KEEP)
    local tip = tonumber(redis.call('GET', p .. 'chart:tip'))
    if tip ~= m then
      if tip then fold(p, tip) end
      redis.call('SET', p .. 'chart:tip', m, 'PXAT', m * MINUTE_MS + KEEP)
    end
  end

  -- The hook of every settling call, once per call: `tally` {outcome = n} (completed,
  -- cancelled, retried, dead), `run`/`wait` the call's emq_observe accumulators (or {}).
  function emq_chart_settled(p, now, tally, run, wait)
    local m = math.floor(now / MINUTE_MS)
    local mk = p .. 'chart:m:' .. m
    local only, kinds = nil, 0
    for outcome in pairs(tally) do
      only, kinds = FIELD[outcome], kinds + 1
    end
    local fields, timed = {}, 0
    local at = run.now
    if at then
      local head = 't'
      if kinds == 1 then head = only end
      for started, per in pairs(wait) do
        local s = tonumber(started)
        if s then
          local rb = head .. bucket(at - s) .. '.'
          for created, n in pairs(per) do
            local c = created and tonumber(created)
            local f = rb
            if c then f = rb .. bucket(s - c) end
            fields[f] = (fields[f] or 0) + n
            timed = timed + n
          end
        end
      end
    end
    if kinds ~= 1 or timed == 0 then  -- counts the times could not carry
      for outcome, n in pairs(tally) do fields[FIELD[outcome]] = n end
    elseif timed < tally[next(tally)] then
      fields[only] = tally[next(tally)] - timed
    end
    local fresh = false
    for f, n in pairs(fields) do
      if redis.call('HINCRBY', mk, f, n) == n then fresh = true end
    end
    if fresh then met(p, m, mk) end
  end
end
