"""One reply table: every code and error prefix any ``.lua`` answers has a mapping."""

from __future__ import annotations

import re
from importlib import resources

import pytest
import redis

import echomq
from echomq.queue import replies
from echomq.queue.keys import Keys

# `return -N` and the per-job codes of the batch scripts (`code = -N`)
_CODE = re.compile(r"(?:\breturn|\bcode\s*=)\s*(-\d+)\b")
_ERROR = re.compile(r"error_reply\(\s*'([^']*)'")


def lua_sources() -> dict[str, str]:
    folder = resources.files("echomq.queue").joinpath("lua")
    found = {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in folder.iterdir()
        if entry.name.endswith(".lua")
    }
    assert len(found) >= 9, "the scan must see the transitions"
    return found


def returned_codes() -> dict[int, list[str]]:
    codes: dict[int, list[str]] = {}
    for name, text in lua_sources().items():
        for match in _CODE.finditer(text):
            codes.setdefault(int(match.group(1)), []).append(name)
    return codes


def error_messages() -> dict[str, str]:
    return {
        message: name
        for name, text in lua_sources().items()
        for message in _ERROR.findall(text)
    }


def as_redis_py_raises(message: str) -> redis.ResponseError:
    """The ResponseError redis-py builds from an error reply (it drops a leading ``ERR ``)."""
    return redis.ResponseError(message.removeprefix("ERR "))


def test_the_scan_finds_what_the_scripts_answer() -> None:
    codes = returned_codes()
    assert {-1, -2, -3, -4} <= set(codes)
    messages = error_messages()
    assert "EMQSTALE extend token mismatch" in messages
    assert "EMQSTATE stalled lane not native" in messages


def test_every_negative_code_a_script_returns_has_a_mapping() -> None:
    missing = {code: files for code, files in returned_codes().items() if code not in replies.CODES}
    assert not missing, f"codes returned by .lua files with no entry in replies.CODES: {missing}"


def test_every_code_maps_to_a_distinct_echomq_error() -> None:
    classes = list(replies.CODES.values())
    assert len(set(classes)) == len(classes)
    for code, error in replies.CODES.items():
        assert code < 0
        assert issubclass(error, echomq.EchoMQError) and error is not echomq.EchoMQError
        with pytest.raises(error):
            replies.raise_for_code(code, "7", "verb")


def test_success_codes_raise_nothing() -> None:
    for code in (1, 2):
        replies.raise_for_code(code, "7", "verb")


def test_every_error_reply_a_script_gives_has_a_prefix() -> None:
    for message, filename in error_messages().items():
        text = message.removeprefix("ERR ")
        assert any(text.startswith(prefix) for prefix in replies.ERROR_PREFIXES), (
            f"{filename}: {message!r} has no entry in replies.ERROR_PREFIXES"
        )
        mapped = replies.translate(as_redis_py_raises(message))
        assert isinstance(mapped, echomq.EchoMQError), message
        assert str(mapped) == text


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ("EMQSTALE extend token mismatch", echomq.StaleToken),
        ("EMQSTATE stalled lane not native", echomq.LaneNotNative),
        ("ERR EMQ.EXTEND lease_ms must be a positive integer", echomq.InvalidArgument),
        ("ERR EMQ.EXTEND lease_ms must be at most 2199023255552", echomq.InvalidArgument),
        ("ERR EMQ.EXTEND keys do not match the queue layout", echomq.InvalidKey),
        ("ERR EMQ.STALLED.CHECK max_stalled must be a positive integer", echomq.InvalidArgument),
        ("ERR EMQ.STALLED.CHECK limit must be a positive integer", echomq.InvalidArgument),
        ("ERR EMQ.STALLED.CHECK max_stalled must be at most 2199023255552",
         echomq.InvalidArgument),
        ("ERR EMQ.STALLED.CHECK limit must be at most 2199023255552", echomq.InvalidArgument),
        ("ERR EMQ.STALLED.CHECK keys do not match the queue layout", echomq.InvalidKey),
    ],
)
def test_each_error_reply_maps_to_its_own_reason(
    message: str, error: type[echomq.EchoMQError]
) -> None:
    assert message in error_messages(), "the table below must name the scripts' real replies"
    mapped = replies.translate(as_redis_py_raises(message))
    assert type(mapped) is error


def test_foreign_errors_are_not_ours() -> None:
    assert replies.translate(redis.ResponseError("WRONGTYPE Operation against a key")) is None
    assert replies.translate(redis.ResponseError("NOSCRIPT No matching script")) is None


def test_a_real_error_reply_arrives_as_its_reason(conn: echomq.Connection, queue: str) -> None:
    # end to end through each executor: the server's text, redis-py's parsing, the table
    job_id = echomq.add(conn, queue, {"n": 1})
    [held] = echomq.claim(conn, queue, lease_ms=60_000)
    with pytest.raises(echomq.StaleToken, match="^EMQSTALE extend token mismatch$"):
        echomq.extend_lock(conn, queue, job_id, held.token + 1, 1000)
    keys = Keys(queue)
    with pytest.raises(redis.ResponseError) as caught:
        conn.redis.evalsha("0" * 40, 0)
    assert replies.translate(caught.value) is None
    assert echomq.get_job(conn, queue, job_id).state == "active"  # type: ignore[union-attr]
    assert conn.redis.zscore(keys.active, job_id) == held.lease_deadline_ms
