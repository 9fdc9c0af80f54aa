"""What the archive did for one queue: the fields a fold and a restore both report, and a
fold's tally, counted as it goes and frozen once into its report."""

from __future__ import annotations

import time
from dataclasses import FrozenInstanceError, dataclass, field, fields

from echomq.archive.slices import GENESIS
from echomq.archive.stream_ids import ZERO_ID


@dataclass(slots=True)
class ArchiveReport:
    """One queue's counts: slices handled, stream entries in them, quarantined among them.

    :class:`FoldReport` (a fold) and :class:`QueueReport` (a
    restore or a verify) extend it.
    """

    queue: str
    entries: int = 0
    quarantined: int = 0
    slices: int = 0

    def to_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(slots=True)
class FoldReport(ArchiveReport):
    """What one fold did. ``entries`` counts every new stream entry, quarantined included.

    ``pulled`` counts slices taken from the remote (another driver folded them),
    ``dropped`` this floor's unuploaded slices that another driver's replaced. A queue
    ``fold_declared`` left alone has ``skipped`` (why) and ``held_by`` (the driver
    holding its lease, when one does).

    Entries EchoMQ did not write: ``foreign`` counts those this fold took that lack
    a field it always writes (``job``, ``outcome``, ``attempts``, ``at``; quarantined,
    kept exactly), ``ahead`` those left in
    the stream because their ids are ahead of the server clock (never folded: see
    :mod:`echomq.archive.stream_checks`), ``set_aside`` those settles have moved to the
    queue's ``foreign`` list so far.

    Frozen once built: a report is a fact about a fold that ended, handed to callers,
    logs and other threads, so none may edit it (``dataclasses.replace`` makes another).
    """

    uploaded: int = 0
    pulled: int = 0
    dropped: int = 0
    trimmed: int = 0
    checkpoint: str = ZERO_ID
    seconds: float = 0.0
    error: str | None = None
    trim_refused: str | None = None
    skipped: str | None = None
    held_by: str | None = None
    foreign: int = 0
    ahead: int = 0
    set_aside: int = 0

    def __setattr__(self, name: str, value: object) -> None:
        # frozen by hand: ``frozen=True`` cannot extend the (mutable) shared base, whose
        # other reports count as they go. ``__init__`` fills each empty slot once.
        try:
            object.__getattribute__(self, name)
        except AttributeError:
            object.__setattr__(self, name, value)
            return
        raise FrozenInstanceError(f"cannot assign to field {name!r} of a FoldReport")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r} of a FoldReport")


@dataclass(slots=True)
class QueueReport(ArchiveReport):
    """What restore or verify found for one queue. ``head_digest`` fixes the whole chain:
    keep it somewhere else to check the bucket against later (``verify(pins=...)``)."""

    skipped: int = 0
    head: str = ZERO_ID
    orphans: list[str] = field(default_factory=list)
    head_digest: str = GENESIS
    rebuilt: bool = False
    objects: int = 0
    pruned_through: str = ZERO_ID


_COUNTS = ("entries", "quarantined", "slices", "uploaded", "pulled", "dropped", "trimmed",
           "foreign", "ahead", "set_aside")


class Tally:
    """One fold's counts while it runs (the upload thread adds its own), frozen once, as
    the fold ends or fails, into its :class:`FoldReport`."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.counts = dict.fromkeys(_COUNTS, 0)
        self.started = time.perf_counter()
        self.trim_refused: str | None = None

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def freeze(self, checkpoint: str, error: str | None = None) -> FoldReport:
        return FoldReport(self.queue, **self.counts, checkpoint=checkpoint,  # type: ignore[arg-type]
                          seconds=time.perf_counter() - self.started, error=error,
                          trim_refused=self.trim_refused)
