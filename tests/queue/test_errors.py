"""One errors module: every exception class of the package lives in ``echomq.errors``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import echomq
from echomq import errors


def every_module() -> list[ModuleType]:
    """Every module of the package, imported (``__main__`` modules would run a command)."""
    found = [echomq]
    for info in pkgutil.walk_packages(echomq.__path__, "echomq."):
        if info.name.rsplit(".", 1)[-1] != "__main__":
            found.append(importlib.import_module(info.name))
    return found


def exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class an echomq module defines or re-exports, by qualified name."""
    found: dict[str, type[BaseException]] = {}
    for module in every_module():
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__.startswith("echomq"):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_the_scan_sees_the_whole_package() -> None:
    names = {m.__name__ for m in every_module()}
    assert {"echomq.errors", "echomq.archive.driver", "echomq.queue.executors"} <= names
    assert "echomq.errors.CancelledError" in exception_classes()


def test_every_exception_class_lives_in_errors_and_derives_from_echomq_error() -> None:
    classes = exception_classes()
    elsewhere = sorted(name for name, cls in classes.items() if cls.__module__ != errors.__name__)
    assert not elsewhere, f"exception classes defined outside echomq/errors.py: {elsewhere}"
    strays = sorted(n for n, cls in classes.items() if not issubclass(cls, echomq.EchoMQError))
    assert not strays, f"exception classes not under EchoMQError: {strays}"


def test_the_errors_stay_importable_from_the_public_faces() -> None:
    """``echomq.archive`` and ``echomq.cancel`` name the errors their users catch (the
    modules inside the archive no longer re-export them: one address each)."""
    from echomq.archive import (
        ChainBroken,
        FloorFull,
        FloorGap,
        LeaseLost,
        ManifestConflict,
        ManifestMissing,
        NotDeclared,
        RemoteConflict,
        RemoteRefused,
        SliceCorrupt,
        StreamGap,
        StreamRewound,
    )
    from echomq.cancel import CancelledError

    for cls in (ChainBroken, FloorGap, LeaseLost, ManifestMissing, NotDeclared, RemoteConflict,
                StreamGap, StreamRewound, FloorFull, ManifestConflict, RemoteRefused,
                SliceCorrupt, CancelledError):
        assert getattr(errors, cls.__name__) is cls
