"""The dashboard's sessions through Starlette's test client, on a real Valkey: a login
is a signed session with an expiry and its own nonce, logout ends it on the server, and
a CSRF token is one the server minted for the session (or the visitor)."""

from __future__ import annotations

import re
import time

from starlette.testclient import TestClient

import echomq
from echomq.queue.connection import Connection
from echomq.web import create_app
from echomq.web.sessions import Sessions
from tests.web.conftest import fill

HTML = {"accept": "text/html"}


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "the page renders no CSRF field"
    return found.group(1)


def logged_in(app: object, token: str = "t") -> TestClient:
    web = TestClient(app)  # type: ignore[arg-type]
    done = web.post("/login", data={"token": token}, follow_redirects=False)
    assert done.status_code == 303 and "emq_session" in web.cookies
    return web


def test_a_csrf_pair_the_server_did_not_mint_is_refused(rconn: Connection,
                                                         queue: str) -> None:
    fill(rconn, queue, pending=2)
    forged = "A" * 43  # the shape of a real one: the cookie and the field agree
    tokenless = create_app(rconn)
    with_token = create_app(rconn, token="t")
    session = logged_in(with_token).cookies["emq_session"]
    url = f"/queues/{queue}/jobs/p-0/remove"
    for web in (TestClient(tokenless, cookies={"emq_csrf": forged}),
                TestClient(with_token, cookies={"emq_csrf": forged, "emq_session": session})):
        assert web.get(f"/queues/{queue}").status_code == 200  # the cookie is kept
        assert web.cookies["emq_csrf"] == forged
        assert web.post(url, data={"csrf": forged}).status_code == 403
        assert web.post(url, headers={"x-csrf-token": forged}).status_code == 403
        assert echomq.get_job(rconn, queue, "p-0") is not None
    done = web.post(url, data={"csrf": csrf_of(web.get(f"/queues/{queue}").text)},
                    follow_redirects=False)
    assert done.status_code == 303 and echomq.get_job(rconn, queue, "p-0") is None


def test_a_csrf_token_is_bound_to_its_session(rconn: Connection, queue: str) -> None:
    fill(rconn, queue, pending=1)
    web = logged_in(create_app(rconn, token="t"))
    before = csrf_of(web.get(f"/queues/{queue}").text)
    web.post("/login", data={"token": "t"})  # a new login in the same browser
    url = f"/queues/{queue}/jobs/p-0/remove"
    assert web.post(url, data={"csrf": before}).status_code == 403
    assert echomq.get_job(rconn, queue, "p-0") is not None
    now = csrf_of(web.get(f"/queues/{queue}").text)
    assert now != before
    assert web.post(url, data={"csrf": now}, follow_redirects=False).status_code == 303


def test_two_logins_give_two_sessions(rconn: Connection) -> None:
    app = create_app(rconn, token="t")
    first, second = logged_in(app), logged_in(app)
    assert first.cookies["emq_session"] != second.cookies["emq_session"]
    assert "t" not in first.cookies["emq_session"].split(".")  # no token in it
    assert first.get("/").status_code == second.get("/").status_code == 200


def test_a_session_copied_before_logout_is_refused_after_it(rconn: Connection,
                                                            queue: str) -> None:
    echomq.add(rconn, queue, 1)  # a queue that exists (an unknown one is a 404)
    app = create_app(rconn, token="t")
    web = logged_in(app)
    copied = web.cookies["emq_session"]
    thief = TestClient(app, cookies={"emq_session": copied})
    assert thief.get(f"/queues/{queue}").status_code == 200
    out = web.post("/logout", data={"csrf": csrf_of(web.get("/").text)},
                   follow_redirects=False)
    assert out.status_code == 303 and out.headers["location"] == "/login"
    assert thief.get(f"/queues/{queue}").status_code == 401
    assert thief.get("/", headers=HTML, follow_redirects=False).headers["location"] \
        == "/login"
    assert logged_in(app).get(f"/queues/{queue}").status_code == 200  # logs in again


def test_an_expired_session_is_refused(rconn: Connection, queue: str) -> None:
    echomq.add(rconn, queue, 1)  # a queue that exists (an unknown one is a 404)
    app = create_app(rconn, token="t", session_ttl_s=600)
    done = TestClient(app).post("/login", data={"token": "t"}, follow_redirects=False)
    assert "Max-Age=600" in done.headers["set-cookie"]
    sessions = app.state.sessions
    expired = sessions.issue(now=time.time() - 601)
    assert TestClient(app, cookies={"emq_session": expired}
                      ).get(f"/queues/{queue}").status_code == 401
    nonce, expiry, signature = sessions.issue().split(".")
    longer = f"{nonce}.{int(expiry) + 86_400}.{signature}"  # a later expiry, not signed
    assert TestClient(app, cookies={"emq_session": longer}
                      ).get(f"/queues/{queue}").status_code == 401
    fresh = sessions.issue()
    assert TestClient(app, cookies={"emq_session": fresh}
                      ).get(f"/queues/{queue}").status_code == 200


def test_the_table_of_live_sessions_stays_bounded() -> None:
    sessions = Sessions(600, max_live=2)
    first, second = sessions.issue(), sessions.issue()
    expired = sessions.issue(now=time.time() - 601)  # a third: the oldest login goes
    third = sessions.issue()  # the expired one is pruned first: no live login goes
    assert sessions.check(first) is None and sessions.check(expired) is None
    assert sessions.check(second) is not None and sessions.check(third) is not None
