"""What the tests share that is not a fixture: keyspace dumps, waits, the stream recorder,
the flaky S3 proxy and the handlers worker processes run. Imported as ``tests.support.x``
(``pythonpath = ["."]`` in pyproject.toml), so child processes started from the repository
root import them the same way."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository root: the working directory of every child process a test starts."""
