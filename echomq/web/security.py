"""The dashboard's gates: the access token, the session, the CSRF token and read-only mode.

- **Token** (optional): every request carries it, as ``Authorization: Bearer <token>``, or
  a session cookie the login form sets (HttpOnly, SameSite=Strict) once the token was given:
  signed, expiring, one per login, revoked by logout (:mod:`echomq.web.sessions`). The
  cookie never holds the token; comparisons use ``hmac.compare_digest``.
- **CSRF**: every action carries a token (a form field or ``X-CSRF-Token``) that the server
  minted for this session (or, with no session, for the visitor id in an HttpOnly,
  SameSite=Strict cookie): an HMAC under the process's secret. Anything else is a 403, a
  cookie and a field that merely agree included.
- **Read-only**: every action answers 403 and the pages render none.
"""

from __future__ import annotations

import hmac
import re
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection, Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from echomq.web.sessions import Sessions

SESSION_COOKIE = "emq_session"
CSRF_COOKIE = "emq_csrf"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
_VISITOR = re.compile(r"[A-Za-z0-9_-]{43}")
"""A visitor id as the Gate mints it (what the CSRF cookie holds)."""
OPEN_PATHS = ("/login", "/static/")
"""Paths reachable without the token: the login form and the page's own files."""

HEADERS = {
    # no inline script runs even if some text escaped the templates; htmx's trigger
    # filters need eval, nothing else does
    "content-security-policy": "default-src 'self'; script-src 'self' 'unsafe-eval'; "
                               "style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
    "x-frame-options": "DENY",  # no clickjacking of the action buttons
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def token_matches(conn: HTTPConnection, token: str) -> bool:
    """The request carries ``token`` in a bearer header."""
    auth = conn.headers.get("authorization", "")
    scheme, _, given = auth.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                              token.encode())


def cookie_path(conn: HTTPConnection) -> str:
    """The cookies' path: the mount point when the dashboard is mounted in an app."""
    return str(conn.scope.get("root_path") or "") + "/"


class Gate:
    """ASGI middleware: the token or session check, the request's CSRF token, and a
    visitor id cookie for every visitor (what CSRF binds to when nobody logged in)."""

    def __init__(self, app: ASGIApp, token: str | None, sessions: Sessions) -> None:
        self.app = app
        self.token = token
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        path = scope["path"][len(scope.get("root_path", "")):] or "/"
        session = None
        if self.token is not None:
            session = self.sessions.check(conn.cookies.get(SESSION_COOKIE, ""))
            if session is None and not path.startswith(OPEN_PATHS) \
                    and not token_matches(conn, self.token):
                await self._refuse(conn, path)(scope, receive, send)
                return
        visitor = conn.cookies.get(CSRF_COOKIE, "")
        fresh = not _VISITOR.fullmatch(visitor)
        if fresh:
            visitor = secrets.token_urlsafe(32)
        state = scope.setdefault("state", {})
        state["session"] = session
        state["csrf"] = self.sessions.csrf(session or visitor)

        secure = "; Secure" if scope.get("scheme") == "https" else ""

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
                if fresh:
                    headers.append("set-cookie", f"{CSRF_COOKIE}={visitor}; "
                                   f"Path={cookie_path(conn)}; HttpOnly; SameSite=Strict{secure}")
            await send(message)

        await self.app(scope, receive, send_with_cookie)

    @staticmethod
    def _refuse(conn: HTTPConnection, path: str) -> Response:
        if conn.scope["method"] == "GET" and "text/html" in conn.headers.get("accept", ""):
            login = str(conn.scope.get("root_path") or "") + "/login"
            return RedirectResponse(login, status_code=303)
        return PlainTextResponse("a token is needed: log in or send Authorization: Bearer",
                                 status_code=401, headers={"WWW-Authenticate": "Bearer"})


def csrf_ok(request: Request, form: Any) -> bool:
    """The form field or the header is the CSRF token this process minted for the
    request's session (or visitor id)."""
    given = str(form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER) or "")
    return hmac.compare_digest(given.encode(), str(request.state.csrf).encode())


def set_session(response: Response, request: Request, sessions: Sessions) -> None:
    """A new login: a new session (new nonce, new expiry) in a new cookie."""
    response.set_cookie(SESSION_COOKIE, sessions.issue(), max_age=int(sessions.ttl_s),
                        path=cookie_path(request), httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
