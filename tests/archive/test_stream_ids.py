"""Stream-id arithmetic, in one module: stepping to the next and previous id, and the last
id of a millisecond (the fold's clock bound, a point-in-time restore's cut)."""

from __future__ import annotations

from echomq.archive.stream_ids import MAX_U64, id_after, id_before, id_lt, last_id_of


def test_stream_ids_step_both_ways_across_a_millisecond() -> None:
    for value in ("0-1", "5-0", "5-7", f"5-{MAX_U64}", "10-0"):
        assert id_before(id_after(value)) == value
        assert id_lt(id_before(value), value) and id_lt(value, id_after(value))
    assert id_before("6-0") == last_id_of(5) == f"5-{MAX_U64}"
    assert id_after(last_id_of(5)) == "6-0"
    assert id_lt("9-0", "10-0")  # numbers, never text
