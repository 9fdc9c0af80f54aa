"""The Host check: the dashboard answers only to the names it is reached by.

DNS rebinding: a page on ``evil.example`` re-points its own name at 127.0.0.1, and the
visitor's browser then sends that page's requests to the loopback dashboard, with
``Host: evil.example`` (and reads the answers: it is the same origin to the browser). A
tokenless loopback dashboard would let that page read and act on every queue. So a
request is served only when its ``Host`` names the address the connection came in on (the
ASGI ``server``), or a loopback name when that address is a loopback one, or a name given
with ``allowed_hosts`` (``--allowed-host``: a DNS name, a reverse proxy's public name);
others get 400. ``"*"`` turns the check off (a proxy in front checks instead). With no
address known (a unix socket), the loopback names are the ones.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from echomq.errors import EchoMQError

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
"""What a loopback-bound dashboard also answers to."""


def host_name(value: str) -> str:
    """The name part of a ``Host`` value or an ``--allowed-host``, in lower case:
    ``[::1]:8000`` is ``::1``, ``Example.COM.:80`` is ``example.com``."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, _ = value[1:].partition("]")
    elif value.count(":") == 1:
        name = value.partition(":")[0]
    else:
        name = value  # a bare name, or a bare IPv6 address
    return name.rstrip(".")


def allowed_names(given: Iterable[str] | None) -> frozenset[str]:
    """``allowed_hosts`` checked: names, never empty."""
    names = set()
    for value in given or ():
        name = value.strip() if value.strip() == "*" else host_name(value)
        if not name or any(c.isspace() or c in "/@?#" for c in name):
            raise EchoMQError(f"allowed host {value!r} is not a host name")
        names.add(name)
    return frozenset(names)


def _is_loopback(name: str) -> bool:
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostCheck:
    """ASGI middleware: 400 for a request whose ``Host`` is not one of the dashboard's."""

    def __init__(self, app: ASGIApp, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed

    def names(self, scope: Scope) -> frozenset[str]:
        """The names this connection may carry: its local address (and the loopback
        names when it is one), and the allowed hosts."""
        server = scope.get("server")
        if not server:
            return self.allowed | LOOPBACK_NAMES
        bound = host_name(str(server[0]))
        return self.allowed | {bound} | (LOOPBACK_NAMES if _is_loopback(bound) else set())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or "*" in self.allowed:
            await self.app(scope, receive, send)
            return
        given = Headers(scope=scope).get("host", "")
        if host_name(given) not in self.names(scope):
            refused = PlainTextResponse(
                f"Host {given!r} is not a name of this dashboard (DNS rebinding?): reach "
                "it by its address, or start it with --allowed-host NAME", status_code=400)
            await refused(scope, receive, send)
            return
        await self.app(scope, receive, send)
