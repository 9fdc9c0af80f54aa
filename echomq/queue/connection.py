"""Connections: a resolved URL and the executor choice (the facade, ``echomq.connect``,
and the CLI find the folder's shared server when no URL is given).

A :class:`Connection` bundles a redis-py client (``decode_responses=True``) with
the executor that runs transitions (``"scripts"`` or ``"functions"``). Every
verb takes a connection explicitly, as RQ does. A URL is only ever shown
through :func:`redact_url`: its password never reaches a message, a log or a repr.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import parse_qsl, unquote_plus, urlsplit

import redis
from redis.connection import HiredisRespSerializer
from redis.utils import HIREDIS_AVAILABLE

from echomq.errors import ConnectionFailed, InvalidArgument
from echomq.queue.keys import (
    PREFIX,
    Keys,
    KeysCache,
    check_prefix,
    cron_set,
    declared_set,
    retained_set,
)
from echomq.queue.validate import ascii_digits

try:
    import hiredis
except ImportError:  # redis-py packs in Python without it
    hiredis = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from echomq.queue.executors import Executor

ExecutorName = Literal["scripts", "functions"]
EXECUTORS: tuple[ExecutorName, ...] = ("scripts", "functions")
DEFAULT_PAYLOAD_LIMIT = 512 * 1024
_SECRET_NAME = re.compile(r"pass|secret|token", re.IGNORECASE)
"""A query parameter whose name holds one of these is a secret (``password``,
``ssl_password``, ``sentinel_password``, ``ssl_keyfile_password``, ``client_secret``,
``token``...)."""
_NUMERIC_OPTIONS = frozenset(
    name for name, read in redis.connection.URL_QUERY_ARGUMENT_PARSERS.items()
    if read in (int, float))
"""The URL options redis-py reads with ``int`` or ``float`` (``db``, ``socket_timeout``...)."""
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
_QUERY_PARAM = re.compile(r"([?&;])([^=&;#?]*)=([^&;]*)")
SENTINEL_SCHEMES = {"redis+sentinel": False, "valkey+sentinel": False,
                    "rediss+sentinel": True, "valkeys+sentinel": True}
"""Each Sentinel scheme, and whether it speaks TLS (:mod:`echomq.queue.sentinel` reads the
rest of such a URL, loaded only for one)."""


def is_sentinel_url(url: str) -> bool:
    """True when ``url`` names Sentinel (``redis+sentinel://`` and its kin)."""
    return url.partition("://")[0].lower() in SENTINEL_SCHEMES


def _hide_param(match: re.Match[str]) -> str:
    """A secret's whole value (a ``#`` or ``?`` in it included) becomes ``***``; another
    value is searched again, for a secret behind an unencoded ``?`` in it."""
    sep, name, value = match.groups()
    if _SECRET_NAME.search(unquote_plus(name)):
        return f"{sep}{name}=***"
    return f"{sep}{name}={_QUERY_PARAM.sub(_hide_param, value)}"


def redact_url(url: str) -> str:
    """``url`` fit to print: ``user:password@`` becomes ``user:***@`` and the value of
    every query parameter whose name holds ``pass``, ``secret`` or ``token`` (any case,
    percent-encoded or not: ``password=``, ``ssl_password=``, ``sentinel_password=``)
    becomes ``***``; everything else is kept. Every form (``redis://``, ``rediss://``,
    ``unix://``, ``redis+sentinel://``) is read the same way.

    It errs on the side of hiding: an unencoded ``@``, ``/``, ``?`` or ``#`` inside a
    password still ends up behind the ``***``.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _QUERY_PARAM.sub(_hide_param, url)
    rest = _QUERY_PARAM.sub(_hide_param, rest)
    userinfo, at, hostpart = rest.rpartition("@")
    if at:
        user, colon, _secret = userinfo.partition(":")
        if colon:
            rest = f"{user}:***@{hostpart}"
    return f"{scheme}://{rest}"


class Connection:
    """A client, an executor and the limits checked before the wire."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        url: str,
        executor: ExecutorName = "scripts",
        payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
        prefix: str = PREFIX,
        cluster: bool = False,
    ) -> None:
        check_settings(executor, payload_limit)
        self.redis = client
        self.cluster = cluster
        self.url = url
        self.executor_name: ExecutorName = executor
        self.payload_limit = payload_limit
        self.prefix = check_prefix(prefix)
        self.declared_set = declared_set(prefix)
        self.retained_set = retained_set(prefix)
        self.cron_set = cron_set(prefix)
        self._executor: Executor | None = None
        self._keys = KeysCache(self.prefix)

    def keys(self, queue: str) -> Keys:
        """The key names of ``queue`` under this connection's prefix (checked, cached)."""
        return self._keys(queue)

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            from echomq.queue.executors import make_executor

            self._executor = make_executor(self)
        return self._executor

    def with_executor(self, executor: ExecutorName) -> Connection:
        """The same server and pool, another executor."""
        return Connection(
            self.redis, url=self.url, executor=executor, payload_limit=self.payload_limit,
            prefix=self.prefix, cluster=self.cluster,
        )

    def close(self) -> None:
        if self.cluster:  # RedisCluster.close() leaves a socket of its first look open
            self.redis.disconnect_connection_pools()  # type: ignore[attr-defined]
        self.redis.close()

    @property
    def safe_url(self) -> str:
        """The URL with its credentials redacted: the one to print or log."""
        return redact_url(self.url)

    def __repr__(self) -> str:
        return (f"Connection({self.safe_url!r}, executor={self.executor_name!r}, "
                f"prefix={self.prefix!r})")


def connect(
    url: str,
    executor: ExecutorName = "scripts",
    *,
    payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
    check: bool = True,
    prefix: str = PREFIX,
    cluster: bool | None = None,
) -> Connection:
    """Connect to ``url`` (``redis://``, ``rediss://``, ``unix://``), already resolved:
    ``echomq.connect()`` without one finds the folder's shared server and comes here.

    TLS options ride on the URL as redis-py reads them, e.g.
    ``rediss://host:6380/0?ssl_ca_certs=/path/ca.pem``. With ``check`` (the
    default) the server is pinged at once, so a wrong URL fails here with
    :class:`ConnectionFailed` naming it (credentials redacted), not at the first verb.

    Every key the library writes starts with ``prefix`` (default ``emq``): queues,
    rows, the declared set and the archive's leases. Two prefixes on one server are
    two separate deployments, e.g. one per tenant, each behind its own ACL
    (``~tenant-a:* &tenant-a:*``); a prefix holds no ``:``, so none nests in another's.

    A Valkey/Redis Cluster is found on its own: when the server says
    ``cluster_enabled:1`` (``INFO cluster``) the connection holds redis-py's
    ``RedisCluster``, which follows the slots from the node ``url`` names.
    ``cluster=True`` asks for it without the look, ``cluster=False`` forces a plain
    client (one node, e.g. to inspect it). With ``check=False`` nothing is asked before
    the first verb, so only ``cluster=True`` gives a Cluster client. Every transition
    touches one queue's keys, all under its ``{queue}`` hash tag: one slot, so any
    transition runs on a Cluster.

    Sentinel: ``redis+sentinel://[user:password@]host:26379,host2:26380/service[/db]``
    (also ``valkey+sentinel://``; ``rediss+sentinel://`` for TLS; the sentinels' own
    password as ``?sentinel_password=``) connects to the primary of ``service`` as the
    sentinels name it, asked again on every new connection, so a Consumer rides a
    failover: its retries reach the promoted replica (:mod:`echomq.queue.sentinel`).
    """
    check_choices(executor, prefix)
    if not isinstance(url, str):
        raise InvalidArgument(f"connect needs a URL, got {url!r} (echomq.connect() without "
                              "one uses the folder's shared server)")
    if is_sentinel_url(url):
        return _connect_sentinel(url, executor, payload_limit=payload_limit, check=check,
                                 prefix=prefix, cluster=cluster)
    check_numbers(url)
    try:
        client = redis.Redis.from_url(url, decode_responses=True, health_check_interval=30,
                                      **wire_options())
    except ValueError as exc:
        raise ConnectionFailed(f"cannot use Redis URL {redact_url(url)!r}: {exc}") from exc
    try:
        check_options(client.connection_pool, url)
    except ConnectionFailed:
        client.close()
        raise
    if cluster is None:
        cluster = check and _says_cluster(client, url)
    if cluster:
        client.close()
        client = cluster_client(url)
    conn = Connection(client, url=url, executor=executor, payload_limit=payload_limit,
                      prefix=prefix, cluster=cluster)
    if check:
        _ping(client, f"cannot reach Redis/Valkey at {redact_url(url)}")
    return conn


def driver_info() -> dict[str, Any]:
    """The client name and version redis-py >= 8 sends (CLIENT SETINFO), given once per
    client: left to it, every new connection reads redis-py's version from the installed
    metadata (~3 M instructions, 14 M the first time, which a worker's start paid to check
    the URL's options). The version is the one redis-py declares, the same text."""
    info = getattr(redis, "DriverInfo", None)
    return {} if info is None else {"driver_info": info(lib_version=redis.__version__)}


def check_choices(executor: str, prefix: str) -> None:
    """The executor and the prefix, refused before anything is reached or started."""
    check_prefix(prefix)
    if executor not in EXECUTORS:
        raise InvalidArgument(f"executor must be one of {EXECUTORS}, got {executor!r}")


def check_settings(executor: str, payload_limit: int) -> None:
    """A connection's executor and payload limit (sync or asyncio), refused in one line."""
    if executor not in EXECUTORS:
        raise InvalidArgument(f"executor must be one of {EXECUTORS}, got {executor!r}")
    if isinstance(payload_limit, bool) or not isinstance(payload_limit, int) or (
        payload_limit <= 0
    ):
        raise InvalidArgument("payload_limit must be a positive integer")


def check_numbers(url: str) -> None:
    """The db (``/3`` or ``?db=3``) and every numeric option of ``url`` in ASCII digits.

    redis-py reads ``/٣`` as db 3 and ``/²`` as no db at all (db 0, silently): a URL that
    does not say what it looks like is refused in one line."""
    parts = urlsplit(url)
    db = parts.path.strip("/") if parts.scheme.lower() in ("redis", "rediss") else ""
    if db and not ascii_digits(db):
        raise ConnectionFailed(f"cannot use Redis URL {redact_url(url)!r}: the db in the "
                               f"path must be a number (ASCII digits), got {db!r}")
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in _NUMERIC_OPTIONS and not _NUMBER.fullmatch(value):
            raise ConnectionFailed(f"cannot use Redis URL {redact_url(url)!r}: {name} must "
                                   f"be a number (ASCII digits), got {value!r}")


def check_options(pool: Any, url: str) -> None:
    """Build (without connecting) one connection of a client's ``pool`` (sync or asyncio),
    so an option of the URL redis-py does not take (``ssl_password`` on ``redis://``, a
    typo) fails here in one line, not as a ``TypeError`` at the first command."""
    try:
        pool.connection_class(**pool.connection_kwargs)
    except TypeError as exc:
        unknown = str(exc).rpartition("argument ")[2] or str(exc)
        raise ConnectionFailed(
            f"cannot use Redis URL {redact_url(url)!r}: unknown option {unknown}") from exc


def _ping(client: redis.Redis, failure: str) -> None:
    """Reach the server once, so a bad address fails at connect with ``failure``, not at
    the first verb."""
    try:
        client.ping()
    except redis.ConnectionError as exc:
        client.close()
        raise ConnectionFailed(f"{failure}: {exc}") from exc


def _connect_sentinel(url: str, executor: ExecutorName, *, payload_limit: int, check: bool,
                      prefix: str, cluster: bool | None) -> Connection:
    """A connection to the primary a Sentinel URL names (never a Cluster)."""
    if cluster:
        raise InvalidArgument("a Sentinel URL names one primary, not a Cluster")
    from echomq.queue.sentinel import sentinel_client  # a plain URL's start never needs it

    client = sentinel_client(url)
    conn = Connection(client, url=url, executor=executor, payload_limit=payload_limit,
                      prefix=prefix)
    if check:
        _ping(client, f"cannot reach the primary through {redact_url(url)}")
    return conn


def _says_cluster(client: redis.Redis, url: str) -> bool:
    """True when the server at ``url`` is a Cluster node (``cluster_enabled:1``)."""
    try:
        return bool(int(client.info("cluster").get("cluster_enabled", 0)))
    except redis.ConnectionError as exc:
        client.close()
        raise ConnectionFailed(
            f"cannot reach Redis/Valkey at {redact_url(url)}: {exc}") from exc
    except redis.ResponseError:
        return False  # INFO refused (an ACL without it): a plain server is the safe guess


class _Packer(HiredisRespSerializer):
    """redis-py's hiredis packer without its pass over the arguments in Python (a generator
    turning bytearray and memoryview into bytes) when hiredis takes them as they are: a
    settle sends four per job (~1,500 instructions a job); anything else goes its way."""

    def pack(self, *args: Any) -> list[bytes]:
        try:
            if " " not in args[0]:  # a one-word command name (else redis-py splits it)
                return [hiredis.pack_command(args)]
        except TypeError:  # a bytes name, or an argument hiredis does not take
            pass
        return cast("list[bytes]", super().pack(*args))


def wire_options() -> dict[str, Any]:
    """What a single server's client is made with beside the URL: its name and version
    given once (:func:`driver_info`), and the packer above where hiredis is there."""
    options = driver_info()
    if hiredis is not None and HIREDIS_AVAILABLE:
        options["command_packer"] = _Packer()
    return options


def cluster_client(url: str) -> redis.Redis:
    """redis-py's Cluster client for the Cluster a node of ``url`` belongs to.

    It offers the commands the library sends with the signatures of ``redis.Redis``
    (typed as one here): keyed commands go to the slot's primary, ``SCRIPT LOAD`` and
    ``FUNCTION LOAD`` to every primary, pipelines are split per node.
    """
    from echomq.queue.cluster import EchoCluster

    try:
        found = EchoCluster.from_url(url, decode_responses=True, health_check_interval=30)
    except (ValueError, redis.exceptions.RedisClusterException) as exc:
        raise ConnectionFailed(f"cannot use Redis Cluster URL {redact_url(url)!r}: {exc}"
                               ) from exc
    except redis.ConnectionError as exc:
        raise ConnectionFailed(f"cannot reach Redis/Valkey at {redact_url(url)}: {exc}") from exc
    return cast(redis.Redis, found)
