"""Every failure a caller can catch, one class per reason.

The seed answers ``{:error, reason}``; here each reason is a subclass of
:class:`EchoMQError`, so ``except echomq.StaleToken`` catches exactly one case.
"""

from __future__ import annotations


class EchoMQError(Exception):
    """Root of every error EchoMQ raises on purpose."""


class InvalidKey(EchoMQError, ValueError):
    """A queue name or job id the key builder refuses (raised before the wire)."""


class InvalidArgument(EchoMQError, ValueError):
    """A lease, count, threshold or payload refused before the wire."""


class JobGone(EchoMQError):
    """The job's row does not exist (never added, removed or trimmed)."""


class StaleToken(EchoMQError):
    """The caller's fencing token no longer equals the row's ``attempts``."""


class NotActive(EchoMQError):
    """The token holds but the id has left the active set (reaped or swept)."""


class NotCancellable(EchoMQError):
    """A cancel request reached a job in a state that cannot be cancelled."""


class NotRemovable(EchoMQError):
    """``remove_job`` reached a job that is neither pending nor scheduled."""


class LaneNotNative(EchoMQError):
    """The functions executor's stalled sweep refuses grouped expired rows."""


class ConsumerCrashed(EchoMQError):
    """A Consumer thread met an exception it could not handle; the Consumer stopped."""


class ConnectionFailed(EchoMQError, ConnectionError):
    """The server at the given URL could not be reached."""


class ArchiveError(EchoMQError):
    """Base of the archive's failures."""


class LeaseHeld(ArchiveError):
    """Another driver holds the fold lease for this stream."""


class StreamUnavailable(ArchiveError):
    """The Redis server behind a stream failed mid-fold; the next fold picks up."""


class RemoteUnavailable(ArchiveError):
    """The object store could not be reached or kept failing; nothing was trimmed."""


class ChecksumMismatch(ArchiveError):
    """An archived object's bytes do not match its recorded checksum."""


class MissingSlice(ArchiveError):
    """The remote's slices do not chain: a range is missing."""
