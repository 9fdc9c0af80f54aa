"""Issue 24: the asyncio executors reload what the server forgot (``SCRIPT FLUSH``,
``FUNCTION FLUSH``) and answer as if nothing happened, one call and a pipeline alike."""

from __future__ import annotations

import asyncio

import pytest
import redis

from echomq import aio
from echomq.errors import JobGone
from echomq.queue import registry
from echomq.queue.transitions import intake, settles
from echomq.servers.valkey import EmbeddedValkey


@pytest.mark.parametrize("executor", ["scripts", "functions"])
def test_a_flushed_cache_or_library_is_loaded_again(private_server: EmbeddedValkey,
                                                    executor: str) -> None:
    admin = redis.Redis.from_url(private_server.url, decode_responses=True)

    def forget() -> None:
        admin.script_flush()
        admin.function_flush()

    async def body() -> tuple[str, list[str], list[object]]:
        async with await aio.connect(private_server.url, executor=executor) as aconn:  # type: ignore[arg-type]
            await aio.add(aconn, "q", 0)
            await asyncio.to_thread(forget)
            one = await aio.add(aconn, "q", 1)
            await asyncio.to_thread(forget)
            many = await aio.add_many(aconn, "q", [2, 3], job_ids=["m2", "m3"])
            await asyncio.to_thread(forget)
            keys = aconn.keys("q")
            piped = await aconn.executor.run_many([
                intake.add_call(keys, [0, 0, 3, "", ""], [("p1", "1")]),
                intake.claim_call(keys, 60_000, 1),
                settles.remove_call(keys, "nosuch"),
            ])
            return one, many, piped

    try:
        one, many, piped = asyncio.run(body())
        assert one == "2" and many == ["m2", "m3"]
        assert piped[0] == ["p1"] and piped[1][1] == "1"
        with pytest.raises(JobGone):
            settles.removed(piped[2], "nosuch")
        if executor == "functions":
            code, version = registry.library()
            assert admin.fcall("emq_version", 0) == version
    finally:
        admin.close()
