"""Two executors, one transition: EVALSHA scripts and the Redis Functions library.

Both take a transition (its name, or a registry script), its keys and its
arguments, and return the same reply; both map error replies through
:mod:`echomq.queue.replies`. Everything above this module is unaware which one
runs. A script outside the library (the archive's) runs by EVALSHA on both.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from echomq.errors import ConnectionFailed
from echomq.queue import registry
from echomq.queue.connection import redact_url
from echomq.queue.replies import translate

if TYPE_CHECKING:
    from echomq.queue.connection import Connection

Arg = str | int | bytes
Call = tuple[str, Sequence[str], Sequence[Arg]]
Prepared = tuple[registry.Transition, Sequence[str], Sequence[Arg]]
"""A transition name, its keys and its arguments."""


class Executor:
    """Runs one transition atomically on the server."""

    name = "base"

    def __init__(self, client: redis.Redis, url: str = "") -> None:
        self.client = client
        self.url = redact_url(url)  # only ever shown in messages

    def run(
        self, transition: str | registry.Transition, keys: Sequence[str], args: Sequence[Arg]
    ) -> Any:
        t = registry.named(transition) if isinstance(transition, str) else transition
        t.check_keys(keys)
        try:
            return self._run(t, keys, args)
        except (redis.ResponseError, redis.ConnectionError) as exc:
            error = server_error(exc, self.url)
            if error is exc:
                raise
            raise error from exc

    def _run(self, t: registry.Transition, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        raise NotImplementedError

    def run_many(self, calls: list[Call]) -> list[Any]:
        """Run several transitions in ONE round trip (a pipeline, not a transaction).

        Each call is atomic on its own; the answer holds, per call, its reply or the
        exception it raised (an ``EchoMQError`` where the reply table knows it). A
        call the server refused as unknown (NOSCRIPT, function not found) did
        nothing, so exactly those are loaded and sent again.
        """
        return self._run_many(calls, None)[0]

    def run_many_waiting(self, calls: list[Call], replicas: int, timeout_ms: int
                         ) -> tuple[list[Any], int]:
        """:meth:`run_many`, then ``WAIT replicas timeout_ms`` on the same connection
        in the same round trip: the replies, and how many replicas acknowledged every
        write of the calls (fewer than ``replicas`` when the timeout came first).

        WAIT counts the writes of its own connection, so it rides in the pipeline that
        carried the calls; on a Cluster that pipeline is the slot's node's own (the
        Cluster pipeline could re-send a failed WAIT alone on another connection, which
        would count nothing and answer at once). All ``calls`` are one queue's: one slot.
        """
        if not calls:
            return [], replicas
        replies, acked = self._run_many(calls, (replicas, timeout_ms))
        return replies, replicas if acked is None else acked

    def _run_many(self, calls: list[Call], wait: tuple[int, int] | None
                  ) -> tuple[list[Any], int | None]:
        if not calls:
            return [], None
        prepared = [(registry.named(n), k, a) for n, k, a in calls]
        for t, keys, _ in prepared:
            t.check_keys(keys)
        try:
            replies, acked = self._waiting_pipeline(prepared, wait)
            missing = [i for i, r in enumerate(replies) if self._is_missing(r)]
            if missing:
                self._load_missing([prepared[i][0] for i in missing])
                again, acked_again = self._waiting_pipeline(
                    [prepared[i] for i in missing], wait)
                for i, reply in zip(missing, again, strict=True):
                    replies[i] = reply
                if acked is not None and acked_again is not None:
                    acked = min(acked, acked_again)
        except redis.ConnectionError as exc:
            raise ConnectionFailed(f"lost the server at {self.url}: {exc}") from exc
        out: list[Any] = []
        for reply in replies:
            if isinstance(reply, redis.ResponseError):
                out.append(translate(reply) or reply)
            else:
                out.append(reply)
        return out, acked

    def _waiting_pipeline(self, calls: list[Prepared], wait: tuple[int, int] | None
                          ) -> tuple[list[Any], int | None]:
        """The pipeline, with ``WAIT`` last when asked: (replies, replicas that acked)."""
        if wait is None:
            return self._pipeline(calls), None
        pipe, on_moved = durable_pipeline(self.client, calls[0][1][0])
        for t, keys, args in calls:
            self._queue(pipe, t, keys, args)
        pipe.execute_command("WAIT", *wait)
        try:
            *replies, acked = pipe.execute(raise_on_error=False)
        except redis.ConnectionError:
            on_moved()  # the node is gone: the next look asks the Cluster where the slot is
            raise
        if any(isinstance(r, redis.exceptions.MovedError) for r in replies):
            on_moved()
            raise redis.ConnectionError("the queue's slot moved to another node")
        return replies, acked if isinstance(acked, int) else 0

    def _pipeline(self, calls: list[Prepared]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for t, keys, args in calls:
            self._queue(pipe, t, keys, args)
        return list(pipe.execute(raise_on_error=False))

    def _queue(
        self, pipe: Any, t: registry.Transition, keys: Sequence[str], args: Sequence[Arg]
    ) -> None:
        raise NotImplementedError

    def _is_missing(self, reply: object) -> bool:
        raise NotImplementedError

    def _load_missing(self, missing: list[registry.Transition]) -> None:
        raise NotImplementedError


def durable_pipeline(client: redis.Redis, key: str) -> tuple[Any, Callable[[], None]]:
    """A pipeline on ONE connection to the server that holds ``key`` (so a WAIT sent in it
    counts the writes before it), and what to do when that server is gone or the slot
    moved (a Cluster refreshes its slot map; one server has nothing to refresh)."""
    if isinstance(client, RedisCluster):
        cluster = client
        node = cluster.get_node_from_key(key)

        def refresh() -> None:
            # no node answers yet: the caller's retry asks again
            with contextlib.suppress(redis.RedisError, RedisClusterException):
                cluster.nodes_manager.initialize()

        return cluster.get_redis_connection(node).pipeline(transaction=False), refresh
    return client.pipeline(transaction=False), lambda: None


def evalsha(
    client: redis.Redis, t: registry.Transition, keys: Sequence[str], args: Sequence[Arg]
) -> Any:
    """EVALSHA first; on NOSCRIPT (a flush, a restart, a failover) load and retry once."""
    try:
        return client.evalsha(t.sha, len(keys), *keys, *args)
    except redis.exceptions.NoScriptError:
        client.script_load(t.script)
        return client.evalsha(t.sha, len(keys), *keys, *args)


class ScriptsExecutor(Executor):
    """Every transition as an EVALSHA script (see :func:`evalsha`)."""

    name = "scripts"

    def _run(self, t: registry.Transition, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        return evalsha(self.client, t, keys, args)

    def _queue(
        self, pipe: Any, t: registry.Transition, keys: Sequence[str], args: Sequence[Arg]
    ) -> None:
        # the command itself, not pipe.evalsha: redis-py's Cluster pipeline refuses the
        # method (it cannot route a script without keys) but routes EVALSHA by its keys
        pipe.execute_command("EVALSHA", t.sha, len(keys), *keys, *args)

    def _is_missing(self, reply: object) -> bool:
        return isinstance(reply, redis.exceptions.NoScriptError)

    def _load_missing(self, missing: list[registry.Transition]) -> None:
        # only the scripts refused: loading every transition's is ~40 round trips (each
        # to every primary on a Cluster), long enough to outlive a short lease just claimed
        for script in {t.script for t in missing}:
            self.client.script_load(script)


class FunctionsExecutor(Executor):
    """FCALL into the ``echomq`` library, loaded once per server run with a version check.

    Functions survive a restart when the server persists, and replicate; when
    the library is missing or older, it is (re)loaded and the call retried once.
    """

    name = "functions"

    def __init__(self, client: redis.Redis, url: str = "", *, cluster: bool = False) -> None:
        super().__init__(client, url)
        self._checked = False
        self._lock = threading.Lock()
        self._cluster = cluster

    def ensure_library(self, force: bool = False) -> None:
        """Load the library where it is missing or older.

        On a Cluster the library must be on EVERY primary (each runs the FCALLs of its
        slots): it is loaded to all of them (``FUNCTION LOAD REPLACE`` goes to every
        primary in redis-py's Cluster client) once per executor, and again when a node
        answers "function not found" (a new primary after a reshard; a replica promoted
        by a failover already has it, since functions replicate).
        """
        with self._lock:
            if self._checked and not force:
                return
            code, version = registry.library()
            if self._cluster:
                self.client.function_load(code, replace=True)
                self._checked = True
                return
            try:
                current = self.client.fcall("emq_version", 0)
            except redis.ResponseError:
                current = None
            if current != version:
                self.client.function_load(code, replace=True)
            self._checked = True

    def _run(self, t: registry.Transition, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        if not t.in_library:
            return evalsha(self.client, t, keys, args)
        self.ensure_library()
        try:
            return self.client.fcall(t.function, len(keys), *keys, *args)
        except redis.ResponseError as exc:
            if "function not found" not in str(exc).lower():
                raise
            self.ensure_library(force=True)
            return self.client.fcall(t.function, len(keys), *keys, *args)

    def _pipeline(self, calls: list[Prepared]) -> list[Any]:
        self.ensure_library()
        return super()._pipeline(calls)

    def _waiting_pipeline(self, calls: list[Prepared], wait: tuple[int, int] | None
                          ) -> tuple[list[Any], int | None]:
        self.ensure_library()
        return super()._waiting_pipeline(calls, wait)

    def _queue(
        self, pipe: Any, t: registry.Transition, keys: Sequence[str], args: Sequence[Arg]
    ) -> None:
        if not t.in_library:  # another part's script: EVALSHA, as the scripts executor
            pipe.execute_command("EVALSHA", t.sha, len(keys), *keys, *args)
            return
        pipe.fcall(t.function, len(keys), *keys, *args)

    def _is_missing(self, reply: object) -> bool:
        return isinstance(reply, redis.exceptions.NoScriptError) or (
            isinstance(reply, redis.ResponseError) and "function not found" in str(reply).lower())

    def _load_missing(self, missing: list[registry.Transition]) -> None:
        if any(t.in_library for t in missing):
            self.ensure_library(force=True)
        for script in {t.script for t in missing if not t.in_library}:
            self.client.script_load(script)


def make_executor(conn: Connection) -> Executor:
    if conn.executor_name == "functions":
        return FunctionsExecutor(conn.redis, conn.url, cluster=conn.cluster)
    return ScriptsExecutor(conn.redis, conn.url)


def server_error(exc: redis.RedisError, url: str) -> BaseException:
    """What a transition's call raises for the server's ``exc`` (sync or asyncio): the
    reply table's error for a refusal it knows, ``ConnectionFailed`` for a lost server
    (``url`` already redacted), else ``exc`` itself."""
    if isinstance(exc, redis.ConnectionError):
        return ConnectionFailed(f"lost the server at {url}: {exc}")
    if isinstance(exc, redis.ResponseError):
        mapped = translate(exc)
        if mapped is not None:
            return mapped
    return exc
