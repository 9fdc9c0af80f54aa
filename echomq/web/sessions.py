"""Login sessions and the CSRF tokens bound to them, signed with one secret per process.

A session cookie is ``nonce.expiry.signature``: a random nonce per login, its expiry (Unix
seconds) and an HMAC-SHA256 of both under the process's secret. A cookie is good while its
signature holds, its expiry is ahead and its nonce is in the table of live sessions; logout
takes the nonce out, so a copy of the cookie stops working with it. A CSRF token is the
HMAC of what it is bound to (the session's nonce, or a visitor's random id when nobody
logged in): only this process can mint one, and a cookie and a field that merely agree are
refused.

Why the secret is random per process and kept nowhere: the table of live sessions is in
this process's memory. A secret kept across restarts would need the table kept too, or a
cookie that logout revoked would come back to life after a restart. A restart logs
everyone out; the token logs them back in.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time

SESSION_TTL_S = 12 * 3600
"""How long a login lasts by default."""
MAX_LIVE = 10_000
"""Live sessions kept at most: past it, the oldest login is logged out (never kept open)."""


class Sessions:
    """The process's secret, its live sessions, and the CSRF tokens bound to them."""

    def __init__(self, ttl_s: float = SESSION_TTL_S, *, max_live: int = MAX_LIVE) -> None:
        if not ttl_s > 0:
            raise ValueError(f"a session must last some time, not {ttl_s!r} s")
        self.ttl_s = ttl_s
        self.max_live = max_live
        self._secret = secrets.token_bytes(32)
        self._live: dict[str, int] = {}  # nonce -> expiry, in login order
        self._lock = threading.Lock()

    def _sign(self, purpose: bytes, text: str) -> str:
        digest = hmac.new(self._secret, purpose + b"\0" + text.encode(), hashlib.sha256)
        return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()

    def issue(self, now: float | None = None) -> str:
        """A new session's cookie value: a fresh nonce, live until ``now`` + the TTL."""
        now = time.time() if now is None else now
        nonce = secrets.token_urlsafe(18)
        expires = int(now + self.ttl_s)
        with self._lock:
            self._prune(time.time())
            self._live[nonce] = expires
            while len(self._live) > self.max_live:
                del self._live[next(iter(self._live))]
        body = f"{nonce}.{expires}"
        return f"{body}.{self._sign(b'session', body)}"

    def check(self, cookie: str) -> str | None:
        """The nonce of a live session this process issued, or None."""
        nonce, _, rest = cookie.partition(".")
        expiry, _, signature = rest.partition(".")
        expected = self._sign(b"session", f"{nonce}.{expiry}")
        if not hmac.compare_digest(signature.encode(), expected.encode()):
            return None
        expires = int(expiry)  # signed by us: digits
        if expires <= time.time():
            with self._lock:
                self._live.pop(nonce, None)
            return None
        with self._lock:
            return nonce if self._live.get(nonce) == expires else None

    def revoke(self, cookie: str) -> None:
        """Log the session out: its cookie, and every copy of it, stops working."""
        nonce = self.check(cookie)
        if nonce is not None:
            with self._lock:
                self._live.pop(nonce, None)

    def csrf(self, binding: str) -> str:
        """The CSRF token for a session nonce or a visitor id: only this process mints it."""
        return self._sign(b"csrf", binding)

    def _prune(self, now: float) -> None:
        for nonce in [n for n, expires in self._live.items() if expires <= now]:
            del self._live[nonce]
