"""The Lua registry: every script's source, loaded once from a package's ``lua/*.lua``.

Each file is one transition (its header lists KEYS, ARGV and replies), named
``<verb>-<numkeys>.lua`` as BullMQ names its scripts: the registry checks the name's
key count against the KEYS the body reads, and every call against that count.

The queue's transitions (:func:`transitions`) form the functions library: the
scripts executor runs ``_lib.lua`` (and any ``_lib_<concern>.lua``) + the file as one
EVALSHA script; the functions executor runs the same bodies wrapped as functions of
one library, ``echomq``.
Another part's scripts (the archive's fold lease, :func:`scripts`) are script-only:
both executors run them by EVALSHA through the same code path. A call names either
kind the same way (:func:`named`). Python never builds Lua beyond this wrapping.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from importlib.resources.abc import Traversable

from echomq.errors import InvalidKey
from echomq.queue import lua_units

LIBRARY_NAME = "echomq"
_SCRIPT_PRELUDE = "local EMQ_NATIVE = false\n"
_LIBRARY_PRELUDE = f"#!lua name={LIBRARY_NAME}\nlocal EMQ_NATIVE = true\n"
_FILENAME = re.compile(r"^(?P<verb>[a-z][a-z_]*)-(?P<numkeys>\d+)\.lua$")
_WORD = re.compile(r"\w")
_KEY_READ = re.compile(r"KEYS\[(\d+)\]")
"""A read of KEYS (:func:`_numkeys` checks by hand that no word runs into it: a leading
``\\b`` here left the search no literal to skip ahead by, 13 M instructions to load the
scripts, in a worker's first claim, against 0.7 M)."""
QUEUE_PACKAGE = "echomq.queue"
ARCHIVE_PACKAGE = "echomq.archive"
SCRIPT_PACKAGES = (ARCHIVE_PACKAGE,)
"""The other parts with scripts of their own (``<package>/lua/``), named by their calls in
:mod:`echomq.queue.transitions` like every transition."""


@dataclass(frozen=True)
class Transition:
    """One transition: its name, its file's body, and the script text EVALSHA runs."""

    name: str
    numkeys: int
    body: str
    lib: tuple[lua_units.Unit, ...]
    """The package's shared helpers (``_lib*.lua``), of which the script carries those its
    body needs (:mod:`echomq.queue.lua_units`) before the body."""
    in_library: bool = True

    @cached_property
    def script(self) -> str:
        """The text EVALSHA runs, joined on first use: a worker runs a few of the ~36
        scripts, and joining every one's ~40 KB at load cost it 8 M instructions."""
        return _SCRIPT_PRELUDE + lua_units.carried(self.lib, self.body) + "\n" + self.body

    def check_keys(self, keys: Sequence[str]) -> None:
        """Refuse a call whose key count is not the file's (a wrong builder, not input)."""
        if len(keys) != self.numkeys:
            raise InvalidKey(f"{self.name} takes {self.numkeys} keys, got {len(keys)}")

    @cached_property
    def sha(self) -> str:
        """EVALSHA's name for the script, hashed once: the script carries ``_lib.lua``
        (~15 KB), so hashing it on every call cost ~11 us per round trip."""
        return hashlib.sha1(self.script.encode()).hexdigest()

    @property
    def function(self) -> str:
        """Its name inside the functions library."""
        return f"emq_{self.name}"


def _lua_dir(package: str) -> Traversable:
    return resources.files(package).joinpath("lua")


def _lib_files(package: str) -> list[str]:
    """The package's shared helper files' texts: ``_lib.lua`` first, then each
    ``_lib_<concern>.lua`` by name (rate limits, deduplication, flows: one file per
    concern, so a feature's helpers sit together), or none."""
    found = sorted(
        (e for e in _lua_dir(package).iterdir() if re.fullmatch(r"_lib(_[a-z_]+)?\.lua", e.name)),
        key=lambda e: (e.name != "_lib.lua", e.name),
    )
    return [e.read_text(encoding="utf-8") for e in found]


def _read_lib(package: str) -> str:
    """The package's shared helpers, whole (the functions library defines them all)."""
    return "\n".join(_lib_files(package))


def _numkeys(filename: str, body: str) -> tuple[str, int]:
    """The verb and key count a file's name states, checked against the KEYS it reads."""
    named = _FILENAME.match(filename)
    if named is None:
        raise RuntimeError(f"{filename}: a script file is named <verb>-<numkeys>.lua")
    numkeys = int(named["numkeys"])
    read = max((int(m[1]) for m in _KEY_READ.finditer(body)
                if not m.start() or not _WORD.match(body, m.start() - 1)), default=0)
    if read != numkeys:
        raise RuntimeError(f"{filename}: its name says {numkeys} keys, its body reads {read}")
    return named["verb"], numkeys


def _load(package: str, in_library: bool) -> dict[str, Transition]:
    lib = tuple(unit for text in _lib_files(package) for unit in lua_units.split(text))
    found: dict[str, Transition] = {}
    for entry in sorted(_lua_dir(package).iterdir(), key=str):
        filename = entry.name
        if not filename.endswith(".lua") or filename.startswith("_"):
            continue
        body = entry.read_text(encoding="utf-8")
        name, numkeys = _numkeys(filename, body)
        found[name] = Transition(name, numkeys, body, lib, in_library)
    return found


@cache
def transitions() -> dict[str, Transition]:
    """The queue's transitions: the functions library is built from exactly these."""
    return _load(QUEUE_PACKAGE, in_library=True)


@cache
def scripts(package: str) -> dict[str, Transition]:
    """Another part's scripts (``package``'s ``lua/``), run by EVALSHA on either executor.

    Their names share one namespace with the queue's transitions (one reply table).
    """
    found = _load(package, in_library=False)
    clash = set(found) & set(transitions())
    if clash:
        raise RuntimeError(f"{package} scripts reuse transition names: {sorted(clash)}")
    return found


def named(name: str) -> Transition:
    """The transition or script a call names. The queue's come first; another part's
    scripts are loaded (their package imported) only when a call names one of them, so
    a client that never folds never imports the archive."""
    found = transitions().get(name)
    if found is not None:
        return found
    for package in SCRIPT_PACKAGES:
        found = scripts(package).get(name)
        if found is not None:
            return found
    raise KeyError(f"no transition or script is named {name!r}")


@cache
def library() -> tuple[str, str]:
    """The functions library's code and its version (a hash of that code).

    ``emq_version`` answers the version, so a client can tell whether the
    server holds this exact library before it calls anything else.
    """
    parts = [_LIBRARY_PRELUDE, _read_lib(QUEUE_PACKAGE)]
    # each transition is registered as an anonymous function, not a local: Lua allows a
    # chunk 200 locals, and the shared helpers (_lib*.lua) need them
    for t in transitions().values():
        parts.append(f"\nredis.register_function('{t.function}', function(KEYS, ARGV)\n"
                     f"{t.body}\nend)\n")
    code = "".join(parts)
    version = hashlib.sha1(code.encode()).hexdigest()
    code += (
        "redis.register_function{function_name='emq_version', "
        f"callback=function() return '{version}' end, flags={{'no-writes'}}}}\n"
    )
    return code, version
