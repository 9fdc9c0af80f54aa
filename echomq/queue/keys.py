"""The key builder: the only place that formats ``<prefix>:{q}:...`` keys.

Every key of queue ``q`` carries the hash tag ``{q}``, so a queue lives in one
cluster slot and one Lua call may touch all of its keys. Every key starts with the
connection's prefix (``emq`` unless ``connect(prefix=...)`` says otherwise), so two
tenants or two ACL scopes on one server never see each other's keys. Names are gated
here, before anything reaches the wire: a name or prefix that could break the layout
or the hash tag is refused with :class:`~echomq.errors.InvalidKey`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import cast

from echomq.errors import InvalidKey

MAX_NAME_LENGTH = 200
"""Bytes of a queue name or a job id in UTF-8 (200 ASCII characters, 50 emoji): a queue
name and a job id together must fit an LMDB key of the archive's floor (511 bytes)."""
PREFIX = "emq"
# Printable, no whitespace, none of the characters that shape the layout, and no
# control character (C0, DEL and the C1 range).
_FORBIDDEN = re.compile(r"[{}:\s\x00-\x1f\x7f-\x9f]")

# what SCAN's MATCH reads as a pattern rather than as itself
_GLOB = re.compile(r"[*?\[\]\\]")

MAX_PREFIX_LENGTH = 64
# Letters, digits and ``_.-``: no brace (the hash tag), nothing a glob or a log would
# misread, and no ``:``, so prefixes never nest: every key of a prefix P starts with
# ``P:`` and no other prefix's key does, and the ACL ``~P:*`` holds one deployment
# (``tenant-a:eu`` would put its keys inside ``tenant-a``'s ``~tenant-a:*``).
_PREFIX = re.compile(r"^[A-Za-z0-9_.-]+$")


def check_prefix(value: object) -> str:
    """Return ``value`` if it is a usable key prefix, else raise ``InvalidKey``."""
    if not isinstance(value, str):
        raise InvalidKey(f"prefix must be a str, got {type(value).__name__}")
    if len(value) > MAX_PREFIX_LENGTH:
        raise InvalidKey(f"prefix is {len(value)} characters; the limit is {MAX_PREFIX_LENGTH}")
    if not _PREFIX.fullmatch(value):
        nested = " (no ':': a prefix must not nest in another's ACL ~prefix:*)" if (
            ":" in value) else ""
        raise InvalidKey(f"prefix {value!r} must be letters, digits and '_.-'{nested}")
    return value


def declared_set(prefix: str = PREFIX) -> str:
    """Every queue of ``prefix`` whose outcome stream is declared for archiving."""
    return check_prefix(prefix) + ":declared"


def retained_set(prefix: str = PREFIX) -> str:
    """Every queue of ``prefix`` with a retention policy, so the scheduler finds them
    without a SCAN."""
    return check_prefix(prefix) + ":retained"


def archive_drivers(prefix: str = PREFIX) -> str:
    """The live archive drivers of ``prefix`` (a sorted set scored by when each one's
    heartbeat lapses, server ms): how many share the declared queues."""
    return check_prefix(prefix) + ":archive-drivers"


def cron_set(prefix: str = PREFIX) -> str:
    """Every queue of ``prefix`` that has cron schedules: what a scheduler walks (no SCAN)."""
    return check_prefix(prefix) + ":cron"


def workers_set(prefix: str = PREFIX) -> str:
    """The workers of ``prefix`` that beat lately: a sorted set of worker ids scored by when
    each one's record lapses (server ms). Its hash tag ``{prefix}`` is every record's too,
    so a beat (``worker_beat-2.lua``) writes one slot; no queue key starts ``prefix:{``
    with it, so no queue scan finds it."""
    p = check_prefix(prefix)
    return f"{p}:workers:{{{p}}}"


def worker_record(prefix: str, worker_id: str) -> str:
    """One worker's heartbeat record (a hash that expires a few beats after its last)."""
    p = check_prefix(prefix)
    return f"{p}:worker:{{{p}}}:{check_name(worker_id, 'worker id')}"


def check_name(value: object, what: str = "name") -> str:
    """Return ``value`` if it is a usable queue name or job id, else raise ``InvalidKey``."""
    # the common case at C speed: ASCII letters and digits (every generated id) are usable
    # whenever the length is; settles gate every job id they send through here
    if type(value) is str and value.isascii() and value.isalnum() and len(value) <= (
            MAX_NAME_LENGTH):
        return value
    if not isinstance(value, str):
        raise InvalidKey(f"{what} must be a str, got {type(value).__name__}")
    if not value:
        raise InvalidKey(f"{what} must not be empty")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidKey(f"{what} {value!r} is not valid UTF-8 text") from exc
    if size > MAX_NAME_LENGTH:
        raise InvalidKey(f"{what} is {size} bytes in UTF-8; the limit is {MAX_NAME_LENGTH}")
    bad = _FORBIDDEN.search(value)
    if bad:
        raise InvalidKey(
            f"{what} {value!r} contains {bad.group()!r}; braces, colons, whitespace "
            "and control characters are not allowed"
        )
    return value


def names_ok(values: Sequence[object]) -> bool:
    """Whether every one of ``values`` would pass :func:`check_name`, tested at once (one
    search over the joined names: the archive checks tens of thousands of job ids per
    slice). ``False`` says only that some value fails; :func:`check_name` says which."""
    try:
        joined = "_".join(values)  # type: ignore[arg-type]  # a non-str raises TypeError
        joined.encode("utf-8")
    except (TypeError, UnicodeEncodeError):
        return False
    names = cast("Sequence[str]", values)  # the join took them: every one is a str
    sizes = map(len, names) if joined.isascii() else (len(n.encode()) for n in names)
    return (all(names) and max(sizes, default=0) <= MAX_NAME_LENGTH
            and _FORBIDDEN.search(joined) is None)


def every_queue(prefix: str, suffix: str) -> tuple[str, re.Pattern[str]]:
    """A SCAN ``MATCH`` glob for the key ``suffix`` of every queue under ``prefix``
    (``*``: every key of every queue), and the regular expression that reads the queue's
    name out of a key it matched (the glob alone would also match a longer key)."""
    tail = ".*" if suffix == "*" else re.escape(suffix)
    return (f"{prefix}:{{*}}:{suffix}",
            re.compile(re.escape(prefix) + r":\{([^{}]+)\}:" + tail + r"\Z"))


@dataclass(frozen=True)
class Keys:
    """All key names of one queue under one prefix."""

    queue: str
    prefix: str = PREFIX

    def __post_init__(self) -> None:
        check_name(self.queue, "queue name")
        check_prefix(self.prefix)

    @cached_property
    def base(self) -> str:
        """``<prefix>:{q}:``: what the Lua scripts extend for rows, metrics and lanes."""
        return f"{self.prefix}:{{{self.queue}}}:"

    @cached_property
    def pattern(self) -> str:
        """A SCAN ``MATCH`` pattern for every key of this queue and of no other: the base
        with the glob characters a name may hold (``*?[]\\``) escaped, then ``*``."""
        return _GLOB.sub(r"\\\g<0>", self.base) + "*"

    def job(self, job_id: str) -> str:
        return self.base + "job:" + check_name(job_id, "job id")

    def metric(self, name: str) -> str:
        return self.base + "metrics:" + check_name(name, "metric name")

    def lane(self, group: str) -> str:
        return self.base + "lane:" + check_name(group, "group")

    def dedup(self, dedup_id: str) -> str:
        """The hold of a dedup id (``add(..., dedup_id=...)``): which job holds it, in
        which mode; gated like a job id (no empty id, no ``{}:``, at most 200 bytes)."""
        return self.base + "dedup:" + check_name(dedup_id, "dedup id")

    def flow_acked(self, parent: str) -> str:
        """The children a waiting flow parent has counted from other queues (``flow_ack``)."""
        return self.base + "flow:" + check_name(parent, "job id") + ":acked"

    @cached_property
    def flow_outbox(self) -> str:
        """Outcomes of this queue's children owed to parents on other queues (field: the
        child's id; ``queue/flows_across.py``)."""
        return self._key("flow_outbox")

    @cached_property
    def dedup_on(self) -> str:
        """Set with the queue's first dedup hold: a settle frees holds only then (one
        EXISTS a call, so a queue that never deduplicates pays nothing per job)."""
        return self._key("dedup-on")

    def _key(self, suffix: str) -> str:
        return self.base + suffix

    @cached_property
    def pending(self) -> str:
        return self._key("pending")

    @cached_property
    def scheduled(self) -> str:
        return self._key("scheduled")

    @cached_property
    def active(self) -> str:
        return self._key("active")

    @cached_property
    def dead(self) -> str:
        return self._key("dead")

    @cached_property
    def completed(self) -> str:
        return self._key("completed")

    @cached_property
    def waiting(self) -> str:
        """A flow's parents waiting for their children (``echomq.chord``, ``chain``)."""
        return self._key("waiting")

    @cached_property
    def events(self) -> str:
        return self._key("events")

    @cached_property
    def job_events(self) -> str:
        """The channel of per-job news (progress, settles) that ``wait`` and ``events``
        hear; Consumers never subscribe to it, so a busy queue's news never wakes them."""
        return self._key("job-events")

    @cached_property
    def listeners(self) -> str:
        """The listener mark: present (with a TTL its listeners renew) while someone
        waits or watches, so settles publish their news only then."""
        return self._key("listeners")

    @cached_property
    def completions(self) -> str:
        return self._key("completions")

    @cached_property
    def gactive(self) -> str:
        return self._key("gactive")

    @cached_property
    def glimits(self) -> str:
        return self._key("glimits")

    @cached_property
    def foreign(self) -> str:
        """Outcome-stream entries a settle set aside: written by someone else with an id
        ahead of the server clock (JSON per entry; read by an operator, reported by the
        archive driver, removed with the queue)."""
        return self._key("foreign")

    @cached_property
    def groups(self) -> str:
        """The groups whose lane holds jobs (the set ``counts`` walks for lane sizes): a
        group joins with its lane's first job and leaves in the call that empties it."""
        return self._key("groups")

    @cached_property
    def ring(self) -> str:
        return self._key("ring")

    @cached_property
    def seq(self) -> str:
        return self._key("seq")

    @cached_property
    def meta(self) -> str:
        """Queue settings: ``stream`` = "1" when the outcome stream is declared for
        archiving, ``folded`` the last stream id the archive's floor holds, and the
        retention policy (``retain_<state>_age`` / ``retain_<state>_count``)."""
        return self._key("meta")

    def chart(self, level: str, index: int) -> str:
        """One chart bucket (``_lib_charts.lua``): ``level`` ``m`` (a minute), ``q`` (15
        minutes) or ``h`` (2 hours); ``index`` the server time in ms over that span."""
        if level not in ("m", "q", "h"):
            raise ValueError(f"unknown chart level {level!r}")
        return f"{self.base}chart:{level}:{int(index)}"

    @cached_property
    def chart_tip(self) -> str:
        """The one minute bucket not yet folded into the coarser ones (its index)."""
        return self._key("chart:tip")

    @cached_property
    def rate(self) -> str:
        """Rate limits (``queue`` and ``g:<group>`` = ``max:per_ms``) and the queue's wait a
        handler asked for (``until``): claim reads them only when this key exists."""
        return self._key("rate")

    @cached_property
    def rate_log(self) -> str:
        """The queue's start log (a sorted set of the last window's claims)."""
        return self._key("rlog")

    def rate_group_log(self, group: str) -> str:
        """A group's start log, like :attr:`rate_log`."""
        return self.base + "rlog:" + check_name(group, "group")

    @cached_property
    def rate_parked(self) -> str:
        """The groups out of the ring until their window opens (scored by when)."""
        return self._key("rparked")

    @cached_property
    def archive_lease(self) -> str:
        return self._key("archive-lease")

    @cached_property
    def schedules(self) -> str:
        """Cron schedules: name -> the JSON spec ``echomq.schedule`` stored."""
        return self._key("schedules")

    @cached_property
    def schedule_fires(self) -> str:
        """Cron schedules: name -> the last fire time (epoch ms) a scheduler enqueued."""
        return self._key("schedule-fires")


class KeysCache:
    """The :class:`Keys` of each queue under one prefix, checked once and kept (at most
    :data:`KEYS_CACHED` names, so a stream of odd names cannot grow it without end): what
    ``conn.keys(queue)`` answers on the sync and the asyncio connection alike."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._found: dict[str, Keys] = {}

    def __call__(self, queue: str) -> Keys:
        found = self._found.get(queue)
        if found is None:
            found = Keys(queue, self.prefix)
            if len(self._found) < KEYS_CACHED:
                self._found[queue] = found
        return found


KEYS_CACHED = 10_000
