"""Helpers shared by the archive tests (plain functions and classes, no fixtures)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from echomq.archive.remote import S3Remote
from echomq.queue.connection import Connection
from echomq.queue.keys import Keys

OUTCOMES = ("completed", "cancelled", "dead")


def bucket_name() -> str:
    return f"t-{uuid.uuid4().hex[:16]}"


class Recorder:
    """Writes outcome entries into a queue's stream exactly as the queue's Lua does."""

    def __init__(self, conn: Connection, queue: str) -> None:
        self.conn = conn
        self.queue = queue
        self.key = Keys(queue).completions
        self.written: list[tuple[str, dict[str, str]]] = []
        self._n = 0

    def add(self, count: int, at: int = 1_700_000_000_000) -> list[str]:
        pipe = self.conn.redis.pipeline(transaction=False)
        batch = []
        for _ in range(count):
            i = self._n
            self._n += 1
            outcome = OUTCOMES[i % 3]
            result = {"completed": json.dumps({"n": i}), "cancelled": f"reason {i}",
                      "dead": f"boom {i}"}[outcome]
            fields = {"job": f"job-{i}", "outcome": outcome, "result": result,
                      "attempts": str(1 + i % 4), "at": str(at + i), "created_at": str(at)}
            batch.append(fields)
            pipe.xadd(self.key, fields)
        ids = pipe.execute()
        self.written += list(zip(ids, batch, strict=True))
        return list(ids)

    def malformed(self, fields: dict[str, str] | None = None) -> str:
        fields = fields or {"job": "broken", "outcome": "exploded", "attempts": "x"}
        sid = self.conn.redis.xadd(self.key, fields)
        self.written.append((sid, fields))
        return str(sid)

    def stream_ids(self) -> list[str]:
        return [sid for sid, _ in self.conn.redis.xrange(self.key)]


def remote_spec(remote: S3Remote, server: Any) -> dict[str, Any]:
    """How a child process rebuilds the same remote."""
    return {"bucket": remote.bucket, "prefix": remote.prefix, "endpoint_url": server.endpoint_url,
            "region": "us-east-1", "aws_access_key_id": server.access_key,
            "aws_secret_access_key": server.secret_key}


class FlakyProxy:
    """A tiny HTTP proxy on loopback that answers 503 to the first ``fail`` requests
    (or to all while ``down``), then forwards verbatim (Host kept, so SigV4 still holds).

    While ``swallow`` (a predicate on the request path) holds, a PUT to a matching path is
    answered 200 with a made-up ETag and never forwarded: a store that keeps nothing.
    """

    def __init__(self, upstream: str, fail: int = 0) -> None:
        import http.client
        import http.server
        import threading
        from urllib.parse import urlsplit

        self.fail = fail
        self.down = False
        self.swallow: Callable[[str], bool] | None = None
        self.swallowed = 0
        self.seen = 0
        self.refused = 0
        target = urlsplit(upstream)
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                proxy.seen += 1
                if proxy.down or proxy.refused < proxy.fail:
                    proxy.refused += 1
                    payload = b"<Error><Code>ServiceUnavailable</Code></Error>"
                    self.send_response(503)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if self.command == "PUT" and proxy.swallow and proxy.swallow(self.path):
                    proxy.swallowed += 1
                    self.send_response(200)
                    self.send_header("ETag", '"00000000000000000000000000000000"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=10)
                conn.putrequest(self.command, self.path, skip_host=True,
                                skip_accept_encoding=True)
                for name, value in self.headers.items():
                    conn.putheader(name, value)
                conn.endheaders(body)
                response = conn.getresponse()
                data = response.read()
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                # a HEAD reply has no body but says the object's length
                length = response.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _relay

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def folded_ids(remote: S3Remote, queue: str) -> list[str]:
    """Every stream id in the remote's chain for ``queue``, in order (duplicates kept)."""
    from echomq.archive.restore import plan

    out: list[str] = []
    for ref in plan(remote, queue).chain:
        out += [item[0] for item in remote.get_slice(ref).items]
    return out


def floor_ids(floor: Any, queue: str) -> list[str]:
    from echomq.archive.entries import id_key

    ids = [e.stream_id for e in floor.entries(queue)] + [
        q.stream_id for q in floor.quarantined(queue)]
    return sorted(ids, key=id_key)
