"""The dashboard's gates: the access token, the CSRF token and read-only mode.

- **Token** (optional): every request carries it, as ``Authorization: Bearer <token>`` or
  as the session cookie the login form sets (HttpOnly, SameSite=Strict). The cookie holds
  an HMAC of the token, not the token; both are compared with ``hmac.compare_digest``.
- **CSRF**: double submit. A random token lives in an HttpOnly, SameSite=Strict cookie and
  is rendered into every form (and htmx's headers); an action whose form field or
  ``X-CSRF-Token`` header does not match the cookie is refused with 403.
- **Read-only**: every action answers 403 and the pages render none.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection, Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

SESSION_COOKIE = "emq_session"
CSRF_COOKIE = "emq_csrf"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
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


def session_value(token: str) -> str:
    """What the session cookie holds for ``token``: proof of it, not the token itself."""
    return hmac.new(token.encode(), b"echomq-dashboard-session", hashlib.sha256).hexdigest()


def token_matches(conn: HTTPConnection, token: str) -> bool:
    """The request carries ``token`` (bearer header) or its session cookie."""
    auth = conn.headers.get("authorization", "")
    scheme, _, given = auth.partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                          token.encode()):
        return True
    cookie = conn.cookies.get(SESSION_COOKIE, "")
    return hmac.compare_digest(cookie.encode(), session_value(token).encode())


def cookie_path(conn: HTTPConnection) -> str:
    """The cookies' path: the mount point when the dashboard is mounted in an app."""
    return str(conn.scope.get("root_path") or "") + "/"


class Gate:
    """ASGI middleware: the token check, and a CSRF cookie for every visitor."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        path = scope["path"][len(scope.get("root_path", "")):] or "/"
        if self.token is not None and not path.startswith(OPEN_PATHS) \
                and not token_matches(conn, self.token):
            await self._refuse(conn, path)(scope, receive, send)
            return
        csrf = conn.cookies.get(CSRF_COOKIE)
        fresh = not csrf or len(csrf) != 43
        if fresh:
            csrf = secrets.token_urlsafe(32)
        scope.setdefault("state", {})["csrf"] = csrf

        secure = "; Secure" if scope.get("scheme") == "https" else ""

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
                if fresh:
                    headers.append("set-cookie", f"{CSRF_COOKIE}={csrf}; "
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
    """The form field or the header matches the CSRF cookie."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    given = str(form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER) or "")
    return bool(cookie) and hmac.compare_digest(given.encode(), cookie.encode())


def set_session(response: Response, request: Request, token: str) -> None:
    response.set_cookie(SESSION_COOKIE, session_value(token), path=cookie_path(request),
                        httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
