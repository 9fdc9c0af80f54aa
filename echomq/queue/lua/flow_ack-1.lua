--[[ flow_ack: a child on another queue settled; its outcome counted on its parent, here
  on the parent's slot (helpers: emq_flow.ack, _lib_flow.lua). The child's settle wrote
  the outcome to its own queue's `flow_outbox`; the worker after its settle round, or
  the beat's fallback, sends it here, then deletes the outbox entry.
  KEYS[1] the parent's row (emq:{q}:job:<parent>)
  ARGV[1] the parent's queue base   ARGV[2] parent id   ARGV[3] the child's queue
  ARGV[4] child id   ARGV[5] its index (from 1)   ARGV[6] '1' completed, '0' failed
  ARGV[7] its result JSON (completed) or why it failed
  Returns: 1 counted (stored, decremented; the last releases the parent, a failure under
  'fail' dead-letters it), 0 a no-op (acked before: the SADD of `flow:<parent>:acked`
  answered 0; or the parent is not waiting any more, or is gone with its obliterated
  queue: nothing is written then). ]]
return emq_flow.ack(ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6] == '1', ARGV[7],
  emq_now())
