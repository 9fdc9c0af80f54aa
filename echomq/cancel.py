"""``echomq.cancel``: cooperative cancel tokens and cancel-by-id (see echomq.jobs.cancel)."""

from echomq.errors import CancelledError
from echomq.jobs.cancel import (
    Cancelled,
    CancelToken,
    cancel,
    check,
    check_or_raise,
    new,
    request,
)

__all__ = [
    "CancelToken",
    "Cancelled",
    "CancelledError",
    "cancel",
    "check",
    "check_or_raise",
    "new",
    "request",
]
