"""The Lua registry: every transition's source, loaded once from ``lua/*.lua``.

Each file is one transition (its header lists KEYS, ARGV and replies). The
scripts executor runs ``_lib.lua`` + the file as one EVALSHA script; the
functions executor runs the same bodies wrapped as functions of one library,
``echomq``. Python never builds Lua beyond this wrapping.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

LIBRARY_NAME = "echomq"
_SCRIPT_PRELUDE = "local EMQ_NATIVE = false\n"
_LIBRARY_PRELUDE = f"#!lua name={LIBRARY_NAME}\nlocal EMQ_NATIVE = true\n"


@dataclass(frozen=True)
class Transition:
    """One transition: its name, its file's body, and the script text EVALSHA runs."""

    name: str
    body: str
    script: str

    @property
    def sha(self) -> str:
        return hashlib.sha1(self.script.encode()).hexdigest()

    @property
    def function(self) -> str:
        """Its name inside the functions library."""
        return f"emq_{self.name}"


def _read(name: str) -> str:
    return _lua_dir().joinpath(name).read_text(encoding="utf-8")


def _lua_dir() -> Traversable:
    return resources.files("echomq.queue").joinpath("lua")


@cache
def transitions() -> dict[str, Transition]:
    lib = _read("_lib.lua")
    found: dict[str, Transition] = {}
    for entry in sorted(_lua_dir().iterdir(), key=str):
        filename = entry.name
        if not filename.endswith(".lua") or filename.startswith("_"):
            continue
        body = entry.read_text(encoding="utf-8")
        name = filename.removesuffix(".lua")
        found[name] = Transition(name, body, _SCRIPT_PRELUDE + lib + "\n" + body)
    return found


@cache
def library() -> tuple[str, str]:
    """The functions library's code and its version (a hash of that code).

    ``emq_version`` answers the version, so a client can tell whether the
    server holds this exact library before it calls anything else.
    """
    parts = [_LIBRARY_PRELUDE, _read("_lib.lua")]
    for t in transitions().values():
        parts.append(f"\nlocal function {t.function}(KEYS, ARGV)\n{t.body}\nend\n")
        parts.append(f"redis.register_function('{t.function}', {t.function})\n")
    code = "".join(parts)
    version = hashlib.sha1(code.encode()).hexdigest()
    code += (
        "redis.register_function{function_name='emq_version', "
        f"callback=function() return '{version}' end, flags={{'no-writes'}}}}\n"
    )
    return code, version
