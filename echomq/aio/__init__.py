"""EchoMQ on asyncio: the producer's verbs awaited, for FastAPI and other async code.

    from echomq import aio

    conn = await aio.connect()                  # or aio.connect(url, prefix=, executor=)
    job_id = await aio.add(conn, "mail", {"to": "a@b"})
    job = await aio.wait(conn, "mail", job_id, timeout_s=30)
    async for event in aio.events(conn, "mail"): ...
    await conn.close()

Every verb builds its call and reads its reply through the sync verb's own gates and the
one catalogue (:mod:`echomq.queue.transitions`), on either executor: the same rows, the
same errors, raised before the wire for bad input. ``import echomq`` does not load this
package; ``echomq.aio`` loads it on first use.
"""

from echomq.aio.connection import AsyncConnection, connect
from echomq.aio.listen import AsyncEventStream, events
from echomq.aio.verbs import add, add_many, cancel_request, get_job
from echomq.aio.wait import wait

__all__ = ["AsyncConnection", "AsyncEventStream", "add", "add_many", "cancel_request",
           "connect", "events", "get_job", "wait"]
