"""Sentinel URLs: a primary found (and found again after a failover) through Sentinel.

``redis+sentinel://[user:password@]host:26379[,host2:26380...]/service[/db][?options]``
(``valkey+sentinel://`` is the same; ``rediss+sentinel://`` or ``valkeys+sentinel://``
speak TLS to the sentinels and to the data nodes). The user and password are the data
nodes'; ``sentinel_password`` (and ``sentinel_username``) in the query are the
sentinels' own, when they have one. The client is redis-py's
:class:`redis.sentinel.Sentinel` and its ``master_for``: every new connection asks a
sentinel where the primary is, so after a failover the next connection (a retry of the
Consumer's claim, settle or beat) lands on the promoted replica. Nothing here ever
shows a password: every message goes through :func:`redact_url`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import redis
from redis.sentinel import Sentinel

from echomq.errors import InvalidArgument
from echomq.queue.connection import SENTINEL_SCHEMES
from echomq.queue.validate import ascii_digits

DEFAULT_PORT = 26379
SENTINEL_TIMEOUT_S = 1.0
"""How long one sentinel may take to answer where the primary is: a dead sentinel is
skipped for the next one, not waited on."""
TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs")


def redact_url(url: str) -> str:
    """The URL fit to print (the one in :mod:`echomq.queue.connection`)."""
    from echomq.queue.connection import redact_url as redact

    return redact(url)


@dataclass(frozen=True)
class SentinelTarget:
    """What a Sentinel URL says: where the sentinels are, which service, which db."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    tls: bool = False
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    sentinel_username: str | None = field(default=None, repr=False)
    sentinel_password: str | None = field(default=None, repr=False)
    tls_options: tuple[tuple[str, str], ...] = ()


def parse(url: str) -> SentinelTarget:
    """Read a Sentinel URL; ``InvalidArgument`` (the URL redacted) when it names no
    sentinel host, no service, a bad port or db, or an option it does not know."""
    shown = redact_url(url)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SENTINEL_SCHEMES:
        raise InvalidArgument(f"not a Sentinel URL: {shown!r} (use redis+sentinel://)")
    userinfo, at, hosts = parts.netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    sentinels = tuple(_address(h, shown) for h in hosts.split(",") if h.strip())
    if not sentinels:
        raise InvalidArgument(f"Sentinel URL {shown!r} names no sentinel host")
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise InvalidArgument(
            f"Sentinel URL {shown!r} names no service (…/service_name[/db])")
    if len(path) > 2:
        raise InvalidArgument(f"Sentinel URL {shown!r}: the path is /service_name[/db]")
    db = _db(path[1], shown) if len(path) == 2 else 0
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(query) - {"sentinel_password", "sentinel_username", "db",
                                   *TLS_OPTIONS})
    if unknown:
        raise InvalidArgument(f"Sentinel URL {shown!r}: unknown option(s) {unknown}")
    if "db" in query:
        db = _db(query["db"], shown)
    tls = SENTINEL_SCHEMES[scheme]
    tls_options = tuple((k, v) for k, v in query.items() if k in TLS_OPTIONS)
    if tls_options and not tls:
        raise InvalidArgument(
            f"Sentinel URL {shown!r}: ssl_* options need rediss+sentinel://")
    return SentinelTarget(
        sentinels=sentinels, service=unquote(path[0]), db=db, tls=tls, username=username,
        password=password, sentinel_username=query.get("sentinel_username") or None,
        sentinel_password=query.get("sentinel_password") or None, tls_options=tls_options)


def _address(text: str, shown: str) -> tuple[str, int]:
    """``host[:port]`` or ``[v6]:port``; the port defaults to 26379."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":")
    else:
        host, _, port_text = text.partition(":")
    if not host:
        raise InvalidArgument(f"Sentinel URL {shown!r} has an empty sentinel host")
    if not port_text:
        return host, DEFAULT_PORT
    if not ascii_digits(port_text) or not 0 < int(port_text) < 65536:
        raise InvalidArgument(f"Sentinel URL {shown!r} has a bad port {port_text!r} "
                              "(ASCII digits, 1 to 65535)")
    return host, int(port_text)


def _db(text: str, shown: str) -> int:
    if not ascii_digits(text):
        raise InvalidArgument(f"Sentinel URL {shown!r}: the db must be a number (ASCII "
                              f"digits), got {text!r}")
    return int(text)


class SentinelPrimary(redis.Redis):
    """The primary's client (``master_for``) that also closes the sentinels' clients."""

    watchers: Sentinel | None = None
    """The sentinels' clients this primary's pool asks."""

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.watchers is not None:
                self.watchers.close()


def sentinel_options(url: str) -> tuple[SentinelTarget, dict[str, Any], dict[str, Any]]:
    """What a Sentinel URL asks of a client, sync or ``echomq.aio``'s: the target, the
    sentinels' own options and the primary's (``master_for``) options."""
    target = parse(url)
    tls: dict[str, Any] = {"ssl": True, **dict(target.tls_options)} if target.tls else {}
    sentinel_kwargs: dict[str, Any] = {
        "socket_timeout": SENTINEL_TIMEOUT_S, "socket_connect_timeout": SENTINEL_TIMEOUT_S,
        "decode_responses": True, **tls}
    if target.sentinel_password is not None:
        sentinel_kwargs["password"] = target.sentinel_password
    if target.sentinel_username is not None:
        sentinel_kwargs["username"] = target.sentinel_username
    primary = {"db": target.db, "username": target.username, "password": target.password,
               "decode_responses": True, "health_check_interval": 30,
               "socket_connect_timeout": 2, **tls}
    return target, sentinel_kwargs, primary


def sentinel_client(url: str) -> redis.Redis:
    """redis-py's client for the primary of the service ``url`` names, found through
    its sentinels on every new connection (so a failover is followed on the next one)."""
    target, sentinel_kwargs, primary = sentinel_options(url)
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        list(target.sentinels), sentinel_kwargs=sentinel_kwargs)
    client: SentinelPrimary = sentinel.master_for(  # type: ignore[no-untyped-call]
        target.service, redis_class=SentinelPrimary, **primary)
    client.watchers = sentinel
    return client
