"""``echomq.connect``: a connection to a URL or, with none, to the folder's shared server.

It lives beside the App, which resolves "no URL" the same way; the substrate's
:func:`echomq.queue.connection.connect` takes only a resolved URL and never starts a server.
"""

from __future__ import annotations

import os

from echomq.queue import connection
from echomq.queue.connection import DEFAULT_PAYLOAD_LIMIT, Connection, ExecutorName
from echomq.queue.keys import PREFIX


def connect(
    url: str | None = None,
    executor: ExecutorName = "scripts",
    *,
    data_dir: str | os.PathLike[str] | None = None,
    payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
    check: bool = True,
    prefix: str = PREFIX,
    cluster: bool | None = None,
) -> Connection:
    """Connect to ``url`` or, with none, to the embedded Valkey of ``data_dir`` (default
    ``$EMQ_DATA_DIR`` or ``./.echomq/valkey``).

    The embedded default is the folder's one *shared*, persistent server, the same
    one ``emq`` commands without ``--url`` use: the first user starts it (AOF,
    ``appendfsync everysec``) and it keeps running after this process exits, so an
    app and a worker on one machine see the same queue. Stop it with
    ``emq server stop``. It is reached on the folder's unix socket with the folder's
    password (the URL, ``unix://:PASSWORD@FOLDER/valkey.sock``, is printed redacted),
    so no other local user can, and a restart does not move it. For a private server
    that dies with its owner, start an :class:`~echomq.servers.valkey.EmbeddedValkey`
    and pass its ``url``.

    The rest (TLS on the URL, the ``prefix``, Cluster and Sentinel, ``check``) is
    :func:`echomq.queue.connection.connect`'s, which takes the resolved URL: the
    substrate never starts a server.
    """
    if url is None:
        from echomq.servers.shared import SharedValkey  # only a no-URL connect needs it

        connection.check_choices(executor, prefix)  # refused before a server starts
        url = SharedValkey(data_dir).ensure().url
    return connection.connect(url, executor, payload_limit=payload_limit, check=check,
                               prefix=prefix, cluster=cluster)
