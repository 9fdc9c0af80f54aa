"""asyncio tests without a plugin: each test runs its coroutine with ``asyncio.run`` on
an ``aio`` connection to the shared server (plain and Cluster passes, both executors)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from echomq import aio

T = TypeVar("T")
Body = Callable[[aio.AsyncConnection], Awaitable[T]]


class Runner:
    """``arun(body)``: ``body(aconn)`` on a fresh event loop and a fresh connection."""

    def __init__(self, url: str, executor: str) -> None:
        self.url = url
        self.executor = executor

    def __call__(self, body: Body[T], **connect: Any) -> T:
        async def main() -> T:
            options = {"executor": self.executor, **connect}
            async with await aio.connect(self.url, **options) as aconn:
                return await body(aconn)

        return asyncio.run(main())


@pytest.fixture
def arun(server_url: str, executor: str) -> Runner:
    return Runner(server_url, executor)
