"""Async producers beside the sync one (issue 24): 20 000 jobs enqueued by the sync
``add_many``, by ``aio.add_many``, by ``aio.add`` from 50 concurrent coroutines on one
connection, and by the sync ``add`` one at a time (the baseline a blocking handler
has). Each run on a fresh queue of one private Valkey, the modes alternated; medians of 3."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable

import echomq
from echomq import aio
from echomq.servers.valkey import EmbeddedValkey

COROUTINES = 50
MODES = {
    "sync": "sync add_many",
    "aio_many": "aio.add_many",
    "aio_add": f"aio.add, {COROUTINES} coroutines",
    "sync_add": "sync add, one at a time",
}


async def _aio_many(url: str, queue: str, payloads: list[dict[str, int]]) -> float:
    async with await aio.connect(url) as conn:
        t0 = time.perf_counter()
        await aio.add_many(conn, queue, payloads)
        return time.perf_counter() - t0


async def _aio_add(url: str, queue: str, payloads: list[dict[str, int]]) -> float:
    async with await aio.connect(url) as conn:
        await aio.add(conn, queue, {"warm": 1})  # the script loaded, the pool opened

        async def producer(share: list[dict[str, int]]) -> None:
            for payload in share:
                await aio.add(conn, queue, payload)

        shares = [payloads[i::COROUTINES] for i in range(COROUTINES)]
        t0 = time.perf_counter()
        await asyncio.gather(*(producer(share) for share in shares))
        return time.perf_counter() - t0


def one_run(url: str, mode: str, queue: str, total: int) -> float:
    """Jobs per second for ``total`` adds in ``mode``."""
    payloads = [{"n": i} for i in range(total)]
    conn = echomq.connect(url)
    try:
        runs: dict[str, Callable[[], float]] = {
            "aio_many": lambda: asyncio.run(_aio_many(url, queue, payloads)),
            "aio_add": lambda: asyncio.run(_aio_add(url, queue, payloads)),
        }
        if mode in runs:
            seconds = runs[mode]()
        else:
            echomq.add(conn, queue, {"warm": 1})
            t0 = time.perf_counter()
            if mode == "sync":
                echomq.add_many(conn, queue, payloads)
            else:
                for payload in payloads:
                    echomq.add(conn, queue, payload)
            seconds = time.perf_counter() - t0
        assert echomq.counts(conn, queue).pending >= total
    finally:
        conn.close()
    return total / seconds


def rows(runs: int = 3, total: int = 20_000) -> list[tuple[str, str]]:
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    with EmbeddedValkey() as server:
        for n in range(runs):
            for mode in MODES:  # alternated: a noisy moment hits every mode alike
                rates[mode].append(one_run(server.url, mode, f"aio-{mode}-{n}", total))
    med = {mode: statistics.median(values) for mode, values in rates.items()}
    out = [(f"producers, {label} (jobs/s)", f"{med[mode]:,.0f}") for mode, label in MODES.items()]
    out += [("producers, aio.add_many / sync add_many", f"{med['aio_many'] / med['sync']:.2f}"),
            (f"producers, aio.add x{COROUTINES} / sync add one at a time",
             f"{med['aio_add'] / med['sync_add']:.2f}")]
    return out


if __name__ == "__main__":
    for name, value in rows():
        print(f"{name:60s} {value:>12s}")
