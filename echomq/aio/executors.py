"""The two executors on asyncio: :mod:`echomq.queue.executors`' ``run`` and ``run_many``
awaited, over ``redis.asyncio``.

The same registry (:mod:`echomq.queue.registry`: each script's text and SHA, the
functions library and its version), the same key-count check and the same reply table
(:func:`echomq.queue.replies.translate`): only the sending is awaited. EVALSHA reloads a
script the server answers NOSCRIPT for; FCALL loads the library when it is missing or
older (on a Cluster: on every primary), then retries once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import redis

from echomq.errors import ConnectionFailed
from echomq.queue import registry
from echomq.queue.connection import redact_url
from echomq.queue.executors import Arg, Call, Prepared, server_error
from echomq.queue.replies import translate


class AsyncExecutor:
    """Runs one transition atomically on the server, awaited."""

    name = "base"

    def __init__(self, client: Any, url: str = "") -> None:
        self.client = client
        self.url = redact_url(url)  # only ever shown in messages

    async def run(self, transition: str | registry.Transition, keys: Sequence[str],
                  args: Sequence[Arg]) -> Any:
        """The transition's reply; its error reply raised as the table's ``EchoMQError``."""
        t = registry.named(transition) if isinstance(transition, str) else transition
        t.check_keys(keys)
        try:
            return await self._run(t, keys, args)
        except (redis.ResponseError, redis.ConnectionError) as exc:
            error = server_error(exc, self.url)
            if error is exc:
                raise
            raise error from exc

    async def _run(self, t: registry.Transition, keys: Sequence[str],
                   args: Sequence[Arg]) -> Any:
        raise NotImplementedError

    async def run_many(self, calls: list[Call]) -> list[Any]:
        """Several transitions in ONE round trip (a pipeline, not a transaction): per call
        its reply or the exception it met; the calls the server did not know (NOSCRIPT,
        function not found) did nothing, and exactly those are loaded and sent again."""
        if not calls:
            return []
        prepared = [(registry.named(n), k, a) for n, k, a in calls]
        for t, keys, _ in prepared:
            t.check_keys(keys)
        try:
            replies = await self._pipeline(prepared)
            missing = [i for i, r in enumerate(replies) if self._is_missing(r)]
            if missing:
                await self._load_missing([prepared[i][0] for i in missing])
                again = await self._pipeline([prepared[i] for i in missing])
                for i, reply in zip(missing, again, strict=True):
                    replies[i] = reply
        except redis.ConnectionError as exc:
            raise ConnectionFailed(f"lost the server at {self.url}: {exc}") from exc
        return [translate(r) or r if isinstance(r, redis.ResponseError) else r
                for r in replies]

    async def _pipeline(self, calls: list[Prepared]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for t, keys, args in calls:
            self._queue(pipe, t, keys, args)
        return list(await pipe.execute(raise_on_error=False))

    def _queue(self, pipe: Any, t: registry.Transition, keys: Sequence[str],
               args: Sequence[Arg]) -> None:
        # the command itself: a Cluster pipeline routes EVALSHA by its keys
        pipe.execute_command("EVALSHA", t.sha, len(keys), *keys, *args)

    def _is_missing(self, reply: object) -> bool:
        return isinstance(reply, redis.exceptions.NoScriptError)

    async def _load_missing(self, missing: list[registry.Transition]) -> None:
        for script in {t.script for t in missing if not t.in_library}:
            await self.client.script_load(script)


async def evalsha(client: Any, t: registry.Transition, keys: Sequence[str],
                  args: Sequence[Arg]) -> Any:
    """EVALSHA first; on NOSCRIPT (a flush, a restart, a failover) load and retry once."""
    try:
        return await client.evalsha(t.sha, len(keys), *keys, *args)
    except redis.exceptions.NoScriptError:
        await client.script_load(t.script)
        return await client.evalsha(t.sha, len(keys), *keys, *args)


class AsyncScriptsExecutor(AsyncExecutor):
    """Every transition as an EVALSHA script."""

    name = "scripts"

    async def _run(self, t: registry.Transition, keys: Sequence[str],
                   args: Sequence[Arg]) -> Any:
        return await evalsha(self.client, t, keys, args)

    async def _load_missing(self, missing: list[registry.Transition]) -> None:
        for script in {t.script for t in missing}:
            await self.client.script_load(script)


class AsyncFunctionsExecutor(AsyncExecutor):
    """FCALL into the ``echomq`` library (:func:`echomq.queue.registry.library`), loaded
    when missing or older, as the sync ``FunctionsExecutor`` does."""

    name = "functions"

    def __init__(self, client: Any, url: str = "", *, cluster: bool = False) -> None:
        super().__init__(client, url)
        self._checked = False
        self._lock = asyncio.Lock()
        self._cluster = cluster

    async def ensure_library(self, force: bool = False) -> None:
        """Load the library where it is missing or older (on a Cluster: to every
        primary, once per executor and again when a node does not know a function)."""
        async with self._lock:
            if self._checked and not force:
                return
            code, version = registry.library()
            if self._cluster:
                await self.client.function_load(code, replace=True)
                self._checked = True
                return
            try:
                current = await self.client.fcall("emq_version", 0)
            except redis.ResponseError:
                current = None
            if current != version:
                await self.client.function_load(code, replace=True)
            self._checked = True

    async def _run(self, t: registry.Transition, keys: Sequence[str],
                   args: Sequence[Arg]) -> Any:
        if not t.in_library:
            return await evalsha(self.client, t, keys, args)
        await self.ensure_library()
        try:
            return await self.client.fcall(t.function, len(keys), *keys, *args)
        except redis.ResponseError as exc:
            if "function not found" not in str(exc).lower():
                raise
            await self.ensure_library(force=True)
            return await self.client.fcall(t.function, len(keys), *keys, *args)

    async def _pipeline(self, calls: list[Prepared]) -> list[Any]:
        await self.ensure_library()
        return await super()._pipeline(calls)

    def _queue(self, pipe: Any, t: registry.Transition, keys: Sequence[str],
               args: Sequence[Arg]) -> None:
        if not t.in_library:  # another part's script: EVALSHA, as the scripts executor
            super()._queue(pipe, t, keys, args)
            return
        pipe.execute_command("FCALL", t.function, len(keys), *keys, *args)

    def _is_missing(self, reply: object) -> bool:
        return isinstance(reply, redis.exceptions.NoScriptError) or (
            isinstance(reply, redis.ResponseError) and "function not found" in str(reply).lower())

    async def _load_missing(self, missing: list[registry.Transition]) -> None:
        if any(t.in_library for t in missing):
            await self.ensure_library(force=True)
        await super()._load_missing(missing)


def make_executor(client: Any, url: str, name: str, *, cluster: bool) -> AsyncExecutor:
    """The executor ``name`` (``"scripts"`` or ``"functions"``) over an asyncio client."""
    if name == "functions":
        return AsyncFunctionsExecutor(client, url, cluster=cluster)
    return AsyncScriptsExecutor(client, url)
