"""One reply table: every code and error prefix any ``.lua`` answers has a mapping.

The scan covers every ``lua/`` folder of the package: the queue's transitions and the
archive's fold-lease scripts alike, all loaded by the one registry.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
import redis

import echomq
from echomq.errors import LeaseHeld, LeaseLost, NotArchiveOfRecord, NotDeclared
from echomq.queue import registry, replies
from echomq.queue.keys import Keys

PACKAGE = Path(echomq.__file__).parent

# `return -N` and the per-job codes of the batch scripts (`code = -N`)
_CODE = re.compile(r"(?:\breturn|\bcode\s*=)\s*(-\d+)\b")
_ERROR = re.compile(r"error_reply\(\s*'([^']*)'")


def lua_files() -> list[Path]:
    """Every ``.lua`` file anywhere in the package."""
    found = sorted(PACKAGE.rglob("*.lua"))
    assert len(found) >= 13, "the scan must see the queue's and the archive's scripts"
    return found


def lua_sources() -> dict[str, str]:
    """Every file's text by its path below the package (two parts may each have a _lib)."""
    return {str(path.relative_to(PACKAGE)): path.read_text(encoding="utf-8")
            for path in lua_files()}


def verb(filename: str) -> str:
    """The transition a file holds: ``claim-3.lua`` holds ``claim``."""
    return filename.rsplit("-", 1)[0]


_HELPER = re.compile(r"^local function (\w+)\(", re.M)


def helper_codes(folder: Path) -> dict[str, set[int]]:
    """The codes each helper of a package's ``_lib.lua`` (and ``_lib_<concern>.lua``
    files) returns, by helper name."""
    text = "\n".join(lib.read_text(encoding="utf-8") for lib in sorted(folder.glob("_lib*.lua")))
    starts = list(_HELPER.finditer(text))
    bodies = {m.group(1): text[m.start():(starts[i + 1].start() if i + 1 < len(starts)
                                          else len(text))] for i, m in enumerate(starts)}
    return {name: {int(c) for c in _CODE.findall(body)} for name, body in bodies.items()}


def returned_codes() -> dict[int, list[str]]:
    """Every negative code each script answers: its own ``return -N`` and those of the
    helpers of its package's ``_lib.lua`` that it calls."""
    codes: dict[int, list[str]] = {}
    for path in lua_files():
        if path.name.startswith("_"):
            continue
        text = path.read_text(encoding="utf-8")
        found = {int(c) for c in _CODE.findall(text)}
        for helper, returned in helper_codes(path.parent).items():
            if re.search(rf"\b{helper}\(", text):
                found |= returned
        for code in sorted(found):
            codes.setdefault(code, []).append(path.name)
    return codes


def loaded_scripts() -> dict[str, registry.Transition]:
    """What the registry loads: the queue's transitions and every other part's scripts."""
    packages = {
        ".".join(path.parent.parent.relative_to(PACKAGE.parent).parts) for path in lua_files()
    }
    found = dict(registry.transitions())
    for package in sorted(packages - {registry.QUEUE_PACKAGE}):
        found.update(registry.scripts(package))
    return found


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
    assert "fold_trim-3.lua" in codes[-3] and "remove_job-5.lua" in codes[-4]
    messages = error_messages()
    assert "EMQSTALE extend token mismatch" in messages
    assert "EMQSTATE stalled lane not native" in messages


def test_every_negative_code_a_script_returns_has_a_mapping() -> None:
    missing = {
        (code, name)
        for code, files in returned_codes().items()
        for name in files
        if code not in replies.codes_of(verb(name))
    }
    assert not missing, f"codes returned by .lua files with no entry in the reply table: {missing}"


def test_every_lua_file_is_loaded_by_the_one_registry() -> None:
    scripts = loaded_scripts()
    loaded = {f"{t.name}-{t.numkeys}.lua" for t in scripts.values()}
    files = {path.name for path in lua_files() if not path.name.startswith("_")}
    assert loaded == files
    assert len(scripts) == len(files), "two files hold one transition name"
    assert set(replies.SCRIPT_CODES) <= set(scripts)


def test_every_script_code_raises_its_own_reason_naming_the_queue() -> None:
    assert replies.codes_of("fold_trim") == {-1: LeaseLost, -2: NotDeclared,
                                            -3: NotArchiveOfRecord}
    assert replies.codes_of("fold_acquire") == {0: LeaseHeld}
    assert replies.codes_of("complete") is replies.CODES
    for name, codes in replies.SCRIPT_CODES.items():
        for code, error in codes.items():
            with pytest.raises(error, match="'q7'"):
                replies.raise_for_reply(name, code, "q7")
        assert replies.raise_for_reply(name, 1, "q7") == 1


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


def test_the_registry_refuses_a_call_with_the_wrong_key_count(
        conn: echomq.Connection, queue: str) -> None:
    keys = Keys(queue)
    with pytest.raises(echomq.InvalidKey, match="purge takes 2 keys, got 1"):
        conn.executor.run("purge", [keys.dead], [keys.base, 0, 10, -1, 0])
    with pytest.raises(echomq.InvalidKey, match="claim takes 3 keys, got 1"):
        conn.executor.run_many([("claim", [keys.pending], [keys.base, 1000, 1])])
    assert echomq.counts(conn, queue).as_dict()["dead"] == 0


def test_a_script_outside_the_library_runs_the_same_on_either_executor(
        conn: echomq.Connection, queue: str) -> None:
    # the archive's scripts are script-only: the functions executor runs them by EVALSHA
    acquire = registry.scripts("echomq.archive")["fold_acquire"]
    assert not acquire.in_library
    lease, token = Keys(queue).archive_lease, uuid.uuid4().hex
    assert conn.executor.run(acquire, [lease], [token, 60_000]) == 1
    assert conn.executor.run(acquire, [lease], ["another", 60_000]) == 0
    assert conn.redis.get(lease) == token
