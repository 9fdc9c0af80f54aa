"""An App on the test's connection, and its workers on threads, stopped at the end."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

import echomq
from echomq.queue.connection import Connection
from tests.support.app_workers import Workers


@pytest.fixture
def app(conn: Connection) -> echomq.App:
    return echomq.App(conn=conn)


@pytest.fixture
def names() -> Callable[[str], str]:
    """Queue names no other test uses: ``names("mail")`` -> ``mail-<random>``."""
    suffix = uuid.uuid4().hex[:8]
    return lambda name: f"{name}-{suffix}"


@pytest.fixture
def workers() -> Iterator[Workers]:
    found = Workers()
    yield found
    found.stop_all()
