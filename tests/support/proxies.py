"""A flaky S3 in front of a real one: refusals, outages and a store that keeps nothing."""

from __future__ import annotations

from collections.abc import Callable


class FlakyProxy:
    """A tiny HTTP proxy on loopback that answers 503 to the first ``fail`` requests
    (or to all while ``down``), then forwards verbatim (Host kept, so SigV4 still holds).

    While ``swallow`` (a predicate on the request path) holds, a PUT to a matching path is
    answered 200 with a made-up ETag and never forwarded: a store that keeps nothing.

    While ``slow`` (a predicate on the request path) holds, a GET to a matching path waits
    ``delay_s`` before it is forwarded (``delayed`` counts them, ``reading`` is set at the
    first): a store far away, whose reads take long.
    """

    def __init__(self, upstream: str, fail: int = 0) -> None:
        import http.client
        import http.server
        import threading
        import time
        from urllib.parse import urlsplit

        self.fail = fail
        self.down = False
        self.swallow: Callable[[str], bool] | None = None
        self.swallowed = 0
        self.slow: Callable[[str], bool] | None = None
        self.delay_s = 0.0
        self.delayed = 0
        self.reading = threading.Event()
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
                if self.command == "GET" and proxy.slow and proxy.slow(self.path):
                    proxy.delayed += 1
                    proxy.reading.set()
                    time.sleep(proxy.delay_s)
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
