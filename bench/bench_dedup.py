"""Deduplicated adds (issue 25): the sync ``add`` one at a time, on one private Valkey,
without a dedup id (the baseline), with a fresh dedup id per add (each takes a hold:
``add_dedup-3.lua`` writes the job and its hold) and with ids that are held (100 ids
cycled: every add after the first 100 answers the holder and writes nothing), and the
debounce path (each add replaces a waiting job's payload). The modes alternated on fresh
queues; medians of 3."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import echomq
from echomq.servers.valkey import EmbeddedValkey

HELD_IDS = 100
MODES = {
    "plain": "adds per second, no dedup id (baseline)",
    "fresh": "adds per second, a new dedup id each (until_done)",
    "held": f"deduplicated adds per second ({HELD_IDS} held ids)",
    "debounce": f"debounced adds per second ({HELD_IDS} waiting jobs replaced)",
}


def one_run(url: str, mode: str, queue: str, total: int) -> float:
    """Adds per second for ``total`` sync adds in ``mode``."""
    conn = echomq.connect(url)
    adds: dict[str, Callable[[int], str]] = {
        "plain": lambda n: echomq.add(conn, queue, {"n": n}),
        "fresh": lambda n: echomq.add(conn, queue, {"n": n}, dedup_id=f"d{n}"),
        "held": lambda n: echomq.add(conn, queue, {"n": n}, dedup_id=f"d{n % HELD_IDS}"),
        "debounce": lambda n: echomq.add(conn, queue, {"n": n}, dedup_id=f"d{n % HELD_IDS}",
                                         dedup_mode="debounce", delay_ms=60_000),
    }
    add = adds[mode]
    try:
        echomq.add(conn, queue, {"warm": 1}, dedup_id="warm")  # both scripts loaded
        echomq.add(conn, queue, {"warm": 1})
        t0 = time.perf_counter()
        for n in range(total):
            add(n)
        seconds = time.perf_counter() - t0
        counts = echomq.counts(conn, queue)
        made = counts.pending + counts.scheduled - 2
        assert made == (total if mode in ("plain", "fresh") else HELD_IDS), (mode, made)
    finally:
        conn.close()
    return total / seconds


def rows(runs: int = 3, total: int = 5_000) -> list[tuple[str, str]]:
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    with EmbeddedValkey() as server:
        for n in range(runs):
            for mode in MODES:  # alternated: a noisy moment hits every mode alike
                rates[mode].append(one_run(server.url, mode, f"dedup-{mode}-{n}", total))
    med = {mode: statistics.median(values) for mode, values in rates.items()}
    out = [(label, f"{med[mode]:,.0f}") for mode, label in MODES.items()]
    out.append(("deduplicated adds vs plain adds", f"{med['held'] / med['plain']:.2f}x"))
    return out


if __name__ == "__main__":
    for measure, value in rows():
        print(f"{measure}: {value}")
