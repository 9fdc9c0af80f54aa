"""Archived outcomes: one stream entry, parsed once, or quarantined when it is malformed.

The queue's Lua writes each settled outcome to ``emq:{q}:completions`` with the fields
``job``, ``outcome``, ``result``, ``attempts``, ``at`` and, when known, ``created_at`` and
``started_at`` (the last claim's time; entries written before it was recorded lack it),
and on a queue declared with ``payload=True`` the job's ``name`` and ``payload`` (its JSON
text, what ``archive.replay`` enqueues again); ``errors`` (each failed attempt's error) and
``logs`` (``job.log``'s lines), JSON arrays, when the job had them; a flow's links,
``parent`` (the job that waited for this one) and ``children`` (a JSON array of ids).
Parsing is strict about what audit queries rely on (job, outcome, attempts, settle time)
and lenient about the rest: anything else is kept verbatim in ``extra``. An entry that
fails the strict part is never dropped; it is quarantined with its raw fields.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from itertools import chain
from typing import IO, Any

import orjson

from echomq.archive.stream_ids import MAX_U64, parse_stream_id
from echomq.errors import InvalidArgument, InvalidKey
from echomq.models import id_list
from echomq.queue.keys import check_name

_INT = re.compile(r"-?[0-9]+\Z")
_KNOWN = frozenset({"job", "outcome", "result", "attempts", "at", "created_at", "started_at",
                    "name", "payload", "errors", "logs", "parent", "children"})


class Outcome(StrEnum):
    """How a job settled: the three outcomes the stream records."""

    COMPLETED = "completed"
    CANCELLED = "cancelled"
    DEAD = "dead"


_OUTCOMES = frozenset(o.value for o in Outcome)


def to_ms(value: int | float | datetime | None) -> int | None:
    """Milliseconds since the epoch from ms or a datetime (naive means UTC)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return int(value.timestamp() * 1000)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"a time must be ms since the epoch or a datetime, got {value!r}")
    return int(value)


def parse_time(text: str | None, what: str = "time") -> int | None:
    """A time typed by a person (a form field, a command option): ms since the epoch or an
    ISO 8601 time (naive means UTC), as ms; ``InvalidArgument`` naming ``what`` otherwise."""
    if not text:
        return None
    if text.isascii() and text.lstrip("-").isdigit():  # int() would read "٣" and "²" too
        return int(text)
    try:
        return to_ms(datetime.fromisoformat(text))
    except ValueError as exc:
        raise InvalidArgument(f"{what}: {text!r} is neither ms nor an ISO 8601 time") from exc


@dataclass(frozen=True, slots=True)
class ArchivedEntry:
    """One settled outcome as the archive keeps it; ``at`` is ms on the server clock."""

    stream_id: str
    queue: str
    job_id: str
    outcome: Outcome
    result: str
    attempts: int
    at: int
    created_at: int | None = None
    extra: tuple[tuple[str, str], ...] = ()
    started_at: int | None = None
    name: str | None = None
    payload: str | None = None
    """The job's payload as JSON text, when its queue records payloads (else None)."""
    errors: str | None = None
    """Its failed attempts' errors as JSON text (an array of objects: at, attempt, type,
    message, traceback; the last 10), or None when no attempt failed."""
    logs: str | None = None
    """Its ``job.log`` lines as JSON text (an array of objects: at, attempt, text), or None."""
    parent: str | None = None
    """The flow's job that waited for this one (``echomq.chord``, ``chain``), or None."""
    children: str | None = None
    """A flow parent's children as JSON text (an array of ids, in order), or None."""

    @property
    def children_value(self) -> list[str]:
        """The recorded children decoded ([] when none or not an array)."""
        return id_list(self.children)

    @property
    def payload_value(self) -> Any:
        """The recorded payload decoded (None when not recorded)."""
        return None if self.payload is None else json.loads(self.payload)

    @property
    def errors_value(self) -> list[dict[str, Any]]:
        """The recorded errors decoded, oldest first ([] when none or not an array)."""
        return _json_list(self.errors)

    @property
    def logs_value(self) -> list[dict[str, Any]]:
        """The recorded log lines decoded, oldest first ([] when none or not an array)."""
        return _json_list(self.logs)

    @property
    def at_datetime(self) -> datetime:
        return datetime.fromtimestamp(self.at / 1000, tz=UTC)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "stream_id": self.stream_id,
            "queue": self.queue,
            "job_id": self.job_id,
            "outcome": self.outcome.value,
            "result": self.result,
            "attempts": self.attempts,
            "at": self.at,
            "created_at": self.created_at,
            "started_at": self.started_at,
        }
        if self.name is not None:
            out["name"] = self.name
        if self.payload is not None:
            out["payload"] = self.payload
        if self.errors is not None:
            out["errors"] = self.errors
        if self.logs is not None:
            out["logs"] = self.logs
        if self.parent is not None:
            out["parent"] = self.parent
        if self.children is not None:
            out["children"] = self.children_value
        if self.extra:
            out["extra"] = dict(self.extra)
        return out


@dataclass(frozen=True, slots=True)
class QuarantinedEntry:
    """A malformed stream entry, kept verbatim so nothing recorded is ever lost."""

    stream_id: str
    queue: str
    fields: tuple[tuple[str, str], ...]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "stream_id": self.stream_id,
            "queue": self.queue,
            "fields": {printable(k): printable(v) for k, v in self.fields},
            "reason": self.reason,
        }


def printable(text: str) -> str:
    """``text`` fit to print and to write as UTF-8: a byte that was not UTF-8 (read as a
    lone surrogate, see ``stream_read``) shows as ``\\xff``; the floor keeps the byte."""
    try:
        text.encode()
        return text
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a surrogate no byte maps to: shown as its escape
            return text.encode("utf-8", "backslashreplace").decode()


def fields_utf8(fields: Mapping[str, str]) -> bool:
    """Whether every field name and value is valid text (no byte read as a surrogate)."""
    try:
        "".join(chain(fields, fields.values())).encode()
    except UnicodeEncodeError:
        return False
    return True


REPEAT = "\x00#"
"""Between a repeated field's name and its ordinal (``result\\x00#2``): a field named
twice in one entry is kept whole this way, and quarantined."""


def malformed_reason(fields: Mapping[str, str]) -> str | None:
    """Why an entry cannot be archived as an outcome, or ``None`` when it can."""
    if not fields_utf8(fields):
        return "a field is not valid UTF-8 (its bytes are kept, each stray one as \\udcXX)"
    if any(REPEAT in name for name in fields):
        return "a field is named more than once (each repeat kept as NAME\\x00#N)"
    job = fields.get("job")
    if not job:
        return "missing job"
    try:
        check_name(job, "job id")
    except InvalidKey as exc:
        return str(exc)
    outcome = fields.get("outcome")
    if outcome is None:
        return "missing outcome"
    if outcome not in Outcome._value2member_map_:
        return f"unknown outcome {outcome!r}"
    for name in ("attempts", "at"):
        value = fields.get(name)
        if value is None or not _INT.match(value):
            return f"{name} is not an integer: {value!r}"
    if fields["at"].startswith("-") or int(fields["at"]) > MAX_U64:
        return f"at is out of range: {fields['at']!r}"
    return None


def index_terms(fields: Mapping[str, str], *, job_checked: bool = False
                ) -> tuple[str, str, int] | str:
    """(job, outcome, at) for the floor's indexes, or why the entry is malformed.

    The fold's hot path: the common shape is accepted with a few C-level checks; anything
    unusual gets the full rules of :func:`malformed_reason`. ``job_checked``: the caller
    already found the job id a valid name (a whole slice's at once, see ``names_ok``).
    """
    job, outcome, attempts, at = (fields.get("job"), fields.get("outcome"),
                                  fields.get("attempts"), fields.get("at"))
    if (outcome in _OUTCOMES and at and attempts and at.isdigit() and at.isascii()
            and len(at) < 20 and attempts.isdigit() and attempts.isascii() and job):
        if not job_checked:
            try:
                check_name(job, "job id")
            except InvalidKey as exc:
                return str(exc)
        return job, outcome, int(at)
    reason = malformed_reason(fields)
    if reason is not None:
        return reason
    return fields["job"], fields["outcome"], int(fields["at"])


def parse_entry(
    queue: str, stream_id: str, fields: Mapping[str, str]
) -> ArchivedEntry | QuarantinedEntry:
    """Parse one raw stream entry; malformed ones come back quarantined, never raised."""
    reason = malformed_reason(fields)
    if reason is not None:
        return QuarantinedEntry(stream_id, queue, tuple(fields.items()), reason)
    created_at, started_at = _time(fields, "created_at"), _time(fields, "started_at")
    extra = tuple((k, v) for k, v in fields.items() if k not in _KNOWN)
    for name, value in (("created_at", created_at), ("started_at", started_at)):
        if name in fields and value is None:
            extra += ((name, fields[name]),)  # kept verbatim: not an integer
    return ArchivedEntry(
        stream_id=stream_id,
        queue=queue,
        job_id=fields["job"],
        outcome=Outcome(fields["outcome"]),
        result=fields.get("result", ""),
        attempts=int(fields["attempts"]),
        at=int(fields["at"]),
        created_at=created_at,
        extra=extra,
        started_at=started_at,
        name=fields.get("name"),
        payload=fields.get("payload"),
        errors=fields.get("errors"),
        logs=fields.get("logs"),
        parent=fields.get("parent"),
        children=fields.get("children"),
    )


def _json_list(text: str | None) -> list[dict[str, Any]]:
    """A recorded JSON array of objects, decoded; [] for None or anything else (an entry
    another writer put in the stream is archived as written, never refused)."""
    if text is None:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, dict)]


def _time(fields: Mapping[str, str], name: str) -> int | None:
    """An optional ms field as an integer, or ``None`` when absent or not an integer."""
    value = fields.get(name)
    return int(value) if value is not None and _INT.match(value) else None


def entry_line(stream_id: str, fields: Mapping[str, str]) -> bytes:
    """The canonical bytes of one raw entry: the slice line and the floor's stored value.

    The same bytes as ``json.dumps({"id": ..., "fields": ...}, ensure_ascii=False,
    separators=(",", ":")).encode()`` (a test holds them equal), written by orjson
    because this is the fold's hottest line.
    """
    try:
        return orjson.dumps({"id": stream_id, "fields": fields})
    except orjson.JSONEncodeError:
        return _escaped_line(stream_id, fields)


def _escaped_line(stream_id: str, fields: Mapping[str, str]) -> bytes:
    """The line of an entry holding bytes that are not UTF-8 (lone surrogates, see
    ``stream_read``): each written as a ``\\udcXX`` escape, which reads back as the same
    surrogate, hence the same byte (orjson refuses to write them)."""
    text = json.dumps({"id": stream_id, "fields": dict(fields)}, ensure_ascii=False,
                      separators=(",", ":"))
    return text.encode("utf-8", "backslashreplace")


def parse_line(line: bytes) -> tuple[str, dict[str, str]]:
    """Inverse of :func:`entry_line`; raises ``ValueError`` on anything else.

    A well-formed line is read by orjson; anything else (a ``\\udcXX`` escape of a byte
    that is not UTF-8, which orjson refuses, or a line that is not an entry at all) by
    :func:`_parse_line_std`, which decides it, and words the error, as before.
    """
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return _parse_line_std(line)
    if obj.__class__ is dict:
        sid, fields = obj.get("id"), obj.get("fields")
        if (sid.__class__ is str and fields.__class__ is dict
                and _ONLY_STR.issuperset(map(type, fields.values()))):
            parse_stream_id(sid)
            return sid, fields
    return _parse_line_std(line)


_ONLY_STR = frozenset({str})


def _parse_line_std(line: bytes) -> tuple[str, dict[str, str]]:
    """:func:`parse_line` by the standard library's JSON."""
    try:
        obj = json.loads(line)
    except RecursionError as exc:  # arrays or objects nested past the stack's depth
        raise ValueError("an entry line nested too deep to read") from exc
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        raise ValueError("an entry line needs an id")
    fields = obj.get("fields")
    if not isinstance(fields, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in fields.items()
    ):
        raise ValueError("an entry line needs string fields")
    parse_stream_id(obj["id"])
    return obj["id"], fields


def write_jsonl(items: Iterable[ArchivedEntry | QuarantinedEntry], out: IO[str]) -> int:
    """Write one JSON object per line (audit exports); returns how many were written."""
    count = 0
    for item in items:
        out.write(json.dumps(item.to_dict(), ensure_ascii=False, separators=(",", ":")))
        out.write("\n")
        count += 1
    return count


def iter_jsonl(items: Iterable[ArchivedEntry | QuarantinedEntry]) -> Iterator[str]:
    for item in items:
        yield json.dumps(item.to_dict(), ensure_ascii=False, separators=(",", ":"))
