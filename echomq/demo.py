"""Moved to :mod:`echomq.cli.demo` (the demo lives beside the command line)."""

from echomq.cli.demo import handler, run_demo

__all__ = ["handler", "run_demo"]
