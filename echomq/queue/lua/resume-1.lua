--[[ resume: let a paused queue hand out jobs again.
  KEYS[1] meta
  ARGV[1] queue base
  Returns: 1 resumed now   0 was not paused (nothing published)
  'EMQBUSY queue is being obliterated' while obliterate_begin's mark stands (its keys
  are half gone: a claim would hand out skeleton rows): nothing changes; the queue stays
  paused until the obliterate completes (obliterate again to finish one interrupted).
  Publishes {"event":"resumed"}, then {"event":"added"}: the wakeup idle Consumers
  already listen for, so they claim at once instead of at their next poll. ]]
if redis.call('HGET', KEYS[1], 'obliterating') == '1' then
  return redis.error_reply('EMQBUSY queue is being obliterated; obliterate it again to finish')
end
if redis.call('HDEL', KEYS[1], 'paused') == 0 then return 0 end
redis.call('PUBLISH', ARGV[1] .. 'events', '{"event":"resumed"}')
redis.call('PUBLISH', ARGV[1] .. 'events', '{"event":"added"}')
return 1
