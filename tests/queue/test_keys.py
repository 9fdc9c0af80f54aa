"""The key builder: one cluster slot per queue, and names gated before the wire."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

import echomq
from echomq.queue.keys import MAX_NAME_LENGTH, Keys, check_name
from tests.support.servers import closed_url

# Text a name may be made of: anything but the layout characters, whitespace (Z*, and the
# C0/C1 whitespace controls) and control characters (Cc). Surrogates are never drawn.
names = st.text(
    st.characters(exclude_categories=["Cc", "Cs", "Zs", "Zl", "Zp"], exclude_characters="{}:"),
    min_size=1,
    max_size=MAX_NAME_LENGTH // 4,  # the limit is in bytes: up to 4 per character
)


def slot(key: str) -> int:
    return key_slot(key.encode("utf-8"))


def all_keys(keys: Keys, ident: str) -> list[str]:
    return [
        keys.pending, keys.scheduled, keys.active, keys.dead, keys.completed, keys.events,
        keys.completions, keys.gactive, keys.glimits, keys.groups, keys.ring, keys.seq, keys.meta,
        keys.archive_lease, keys.base, keys.job(ident), keys.lane(ident), keys.metric(ident),
    ]


def test_key_slot_is_the_hash_tag_slot() -> None:
    # redis-py's CRC16 hashes only the {tag} when there is one: the cluster rule we rely on
    assert slot("{user1000}.following") == slot("{user1000}.followers") == slot("user1000")
    assert slot("foo{{bar}}zap") == slot("{bar")  # the first {...} is the tag, as the spec says
    assert slot("123456789") == 12739  # the CRC16/XMODEM check value 0x31C3 mod 16384


@settings(max_examples=300, deadline=None)
@given(queue=st.text(min_size=1, max_size=MAX_NAME_LENGTH), ident=st.text(min_size=1))
def test_every_accepted_name_yields_keys_in_the_queues_slot(queue: str, ident: str) -> None:
    try:
        check_name(queue)
        check_name(ident)
    except echomq.InvalidKey:
        return
    keys = Keys(queue)
    expected = slot(f"{{{queue}}}")
    for key in all_keys(keys, ident):
        assert key.startswith(f"emq:{{{queue}}}:")
        assert key.count("{") == 1 and key.count("}") == 1
        assert slot(key) == expected


@settings(max_examples=200, deadline=None)
@given(queue=names, ident=names)
def test_printable_names_are_accepted(queue: str, ident: str) -> None:
    assert check_name(queue) == queue
    assert Keys(queue).job(ident) == f"emq:{{{queue}}}:job:{ident}"


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "x" * (MAX_NAME_LENGTH + 1),
        "a{b",
        "a}b",
        "{ab}",
        "a:b",
        "a b",
        "a\tb",
        "a\nb",
        "a\u00a0b",
        "a\u2028b",
        "a\x00b",
        "a\x1bb",
        "a\x7fb",
        "a\x85b",
        "a\x9bb",
    ],
)
def test_refused_names(bad: str) -> None:
    with pytest.raises(echomq.InvalidKey):
        check_name(bad)
    with pytest.raises(echomq.InvalidKey):
        Keys(bad)
    with pytest.raises(echomq.InvalidKey):
        Keys("fine").job(bad)


@settings(max_examples=100, deadline=None)
@given(
    prefix=st.text(max_size=20),
    bad=st.one_of(st.sampled_from("{}:"), st.characters(categories=["Cc", "Zs", "Zl", "Zp"])),
    suffix=st.text(max_size=20),
)
def test_any_layout_whitespace_or_control_character_is_refused(
    prefix: str, bad: str, suffix: str
) -> None:
    with pytest.raises(echomq.InvalidKey):
        check_name(prefix + bad + suffix)


@pytest.mark.parametrize("bad", [None, 7, b"bytes", ["a"], 1.5])
def test_non_str_names_are_refused(bad: object) -> None:
    with pytest.raises(echomq.InvalidKey, match="must be a str"):
        check_name(bad)
    with pytest.raises(echomq.InvalidKey):
        Keys(bad)  # type: ignore[arg-type]


def test_the_limit_is_inclusive() -> None:
    assert check_name("x" * MAX_NAME_LENGTH) == "x" * MAX_NAME_LENGTH


def test_invalid_names_are_refused_before_the_wire() -> None:
    # nothing listens on this port: any command sent would raise ConnectionFailed or a
    # redis ConnectionError, so InvalidKey proves the gate ran first
    conn = echomq.connect(closed_url(), check=False)
    try:
        with pytest.raises(echomq.InvalidKey):
            echomq.add(conn, "bad:queue", {"a": 1})
        with pytest.raises(echomq.InvalidKey):
            echomq.add(conn, "fine", {"a": 1}, job_id="bad id")
        with pytest.raises(echomq.InvalidKey):
            echomq.add(conn, "fine", {"a": 1}, group="g{1}")
        with pytest.raises(echomq.InvalidKey):
            echomq.add_many(conn, "fine", [{"a": 1}, {"b": 2}], job_ids=["ok", "not ok"])
        with pytest.raises(echomq.InvalidKey):
            echomq.claim(conn, "q{", lease_ms=1000)
        with pytest.raises(echomq.InvalidKey):
            echomq.complete(conn, "fine", "x:y", 1)
        with pytest.raises(echomq.InvalidKey):
            echomq.fail(conn, "fine", "", 1, "boom")
        with pytest.raises(echomq.InvalidKey):
            echomq.remove_job(conn, "fine", "a\nb")
        with pytest.raises(echomq.InvalidKey):
            echomq.extend_lock(conn, "fine", "}", 1, 1000)
        with pytest.raises(echomq.InvalidKey):
            echomq.release_many(conn, "fine", [("a b", 1)])
        with pytest.raises(echomq.InvalidKey):
            echomq.reap(conn, "")
        with pytest.raises(echomq.InvalidKey):
            echomq.stalled_check(conn, "a:b")
        with pytest.raises(echomq.InvalidKey):
            echomq.get_job(conn, "fine", "\x00")
        with pytest.raises(echomq.InvalidKey):
            echomq.cancel.request(conn, "fine", "{x}")
        with pytest.raises(echomq.InvalidKey):
            echomq.publish(conn, "fine", "cancel", job_id="a:b")
        with pytest.raises(echomq.InvalidKey):
            echomq.set_group_limit(conn, "fine", "g:1", 2)
        # and the same connection does reach for the wire once the names are fine
        with pytest.raises(echomq.ConnectionFailed):
            echomq.claim(conn, "fine", lease_ms=1000)
    finally:
        conn.close()


def test_the_name_limit_is_in_bytes_so_a_queue_and_a_job_id_fit_one_floor_key() -> None:
    assert check_name("🦄" * 50) == "🦄" * 50  # 200 bytes
    for name in ("🦄" * 51, "é" * 101, "x" * 199 + "é"):
        with pytest.raises(echomq.InvalidKey, match="bytes in UTF-8"):
            check_name(name)
        with pytest.raises(echomq.InvalidKey):
            Keys(name)


def test_the_letters_and_digits_shortcut_keeps_the_limit_and_the_type() -> None:
    """Plain letters and digits are taken at once, but never past the limit, and a str
    subclass or a non-ASCII digit still goes through every check."""
    assert check_name("a" * MAX_NAME_LENGTH) == "a" * MAX_NAME_LENGTH
    with pytest.raises(echomq.InvalidKey, match="the limit is"):
        check_name("7" * (MAX_NAME_LENGTH + 1))

    class Name(str):
        pass

    assert check_name(Name("abc")) == "abc"
    assert check_name("٣٤") == "٣٤"  # printable, two bytes each: the slow path accepts it
