"""Queue names and job ids that look like paths: every name the key builder takes renders,
links and is acted on as itself (never as another queue's job), through the test client
against a real Valkey. The same in a real browser is in test_browser.py."""

from __future__ import annotations

import html
import re
import uuid

import echomq
from echomq.queue.connection import Connection
from echomq.queue.keys import check_name
from tests.web.test_routes import client, csrf_of

ODD = ("a/b", "..", ".", "x/../y", "q?s=1#f%2F", "é/ü")
"""Queue names the key builder takes that a path would misread."""


def _links(page: str, text: str) -> list[str]:
    return [html.unescape(h) for h in re.findall(
        rf'<a href="([^"]+)">{re.escape(html.escape(text, quote=False))}</a>', page)]


def _form(page: str, action: str) -> tuple[str, dict[str, str]]:
    """The first form posting to a path ending in ``action``: its action and its fields."""
    found = re.search(rf'action="([^"]*{action})"[^>]*>(.*?)</form>', page, re.S)
    assert found, page
    fields = {k: html.unescape(v)
              for k, v in re.findall(r'name="([^"]+)" value="([^"]*)"', found.group(2))}
    return html.unescape(found.group(1)), fields


def test_every_odd_queue_name_renders_links_and_pauses(rconn: Connection) -> None:
    tag = uuid.uuid4().hex[:6]
    names = [check_name(f"{odd}-{tag}" if odd in ("..", ".") else f"{tag}{odd}")
             for odd in ODD] + [".."]
    for name in names:
        echomq.add(rconn, name, {"n": 1}, job_id="j/../1")
    web = client(rconn)
    try:
        for name in names:
            overview = web.get("/", params={"q": name})
            assert overview.status_code == 200, overview.text
            links = _links(overview.text, name)
            assert links, f"no link to {name!r}"
            page = web.get(links[0])
            assert page.status_code == 200
            assert f'<span class="name">{html.escape(name, quote=False)}</span>' in page.text
            job_links = _links(page.text, "j/../1")
            assert job_links
            job = web.get(job_links[0])
            assert job.status_code == 200 and "j/../1" in job.text
            action, fields = _form(page.text, "/pause")
            assert fields["queue"] == name
            done = web.post(action, data=fields)
            assert done.status_code == 200 and echomq.is_paused(rconn, name)
            assert f"paused {html.escape(name, quote=False)}" in done.text
    finally:
        for name in names:
            echomq.obliterate(rconn, name, force=True)


def test_an_action_on_a_path_like_id_acts_on_its_own_queue(rconn: Connection) -> None:
    tag = uuid.uuid4().hex[:6]
    uploads, billing = f"uploads-{tag}", f"billing-{tag}"
    odd = f"../../{billing}/jobs/invoice-42"
    echomq.add(rconn, uploads, {"n": "odd"}, job_id=odd)
    echomq.add(rconn, billing, {"n": "bill"}, job_id="invoice-42")
    web = client(rconn)
    page = web.get("/queue", params={"queue": uploads})
    action, fields = _form(page.text, "/remove")
    assert (fields["queue"], fields["job"]) == (uploads, odd)
    assert billing not in action  # the path names no queue and no job
    done = web.post(action, data={**fields, "csrf": csrf_of(page.text)})
    assert done.status_code == 200
    assert f"removed {html.escape(odd, quote=False)} in {uploads}" in done.text
    assert echomq.get_job(rconn, uploads, odd) is None
    assert echomq.get_job(rconn, billing, "invoice-42") is not None


def test_a_missing_or_bad_name_is_a_400(rconn: Connection, queue: str) -> None:
    web = client(rconn)
    assert web.get("/queue").status_code == 400
    assert web.get("/queue", params={"queue": "bad:name"}).status_code == 400
    assert web.get("/job", params={"queue": queue}).status_code == 400
    echomq.add(rconn, queue, {"n": 1})
    page = web.get("/queue", params={"queue": queue})
    assert web.post("/job/remove", data={"csrf": csrf_of(page.text), "queue": queue}
                    ).status_code == 400


def test_the_dead_letter_forms_carry_an_odd_queue_in_the_body(rconn: Connection) -> None:
    queue = f"mail/../{uuid.uuid4().hex[:6]}"
    ids = echomq.add_many(rconn, queue, [{"n": i} for i in range(3)],
                          job_ids=["d/1", "../d2", "d?3"], max_attempts=1)
    for job in echomq.claim(rconn, queue, count=3):
        echomq.fail(rconn, queue, job.id, job.token, "boom")
    web = client(rconn)
    try:
        page = web.get("/queue", params={"queue": queue, "state": "dead"})
        action, fields = _form(page.text, "/dead")
        assert fields["queue"] == queue and queue not in action
        ticked = re.findall(r'name="ids" value="([^"]*)"', page.text)
        assert sorted(html.unescape(i) for i in ticked) == sorted(ids)
        done = web.post(action, data={**fields, "op": "retry", "ids": ["d/1", "../d2"]})
        assert f"retried 2 dead job(s) in {html.escape(queue, quote=False)}" in done.text
        assert echomq.counts(rconn, queue).dead == 1
    finally:
        echomq.obliterate(rconn, queue, force=True)
