"""Events on ``emq:{q}:events``: fire-and-forget pub/sub."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import echomq
from echomq.queue.events import Event, channel
from tests.support.waits import wait_until


@pytest.fixture
def listener(conn: echomq.Connection, queue: str) -> Iterator[Any]:
    # the connection's own client: on a Cluster it subscribes where the channel's slot
    # lives, the node PUBLISH counts its receivers on
    client = echomq.connect(conn.url).redis
    pubsub = client.pubsub()  # type: ignore[no-untyped-call]
    pubsub.subscribe(channel(conn, queue))
    assert wait_until(lambda: pubsub.get_message(timeout=0.1))["type"] == "subscribe"
    yield pubsub
    pubsub.close()
    client.close()


def received(pubsub: Any) -> list[Event | None]:
    """Every message waiting now, decoded (waits briefly for the first)."""
    out: list[Event | None] = []
    message = pubsub.get_message(timeout=0.3)
    while message is not None:
        if message["type"] == "message":
            out.append(Event.decode(message["data"]))
        message = pubsub.get_message(timeout=0.05)
    return out


def test_the_channel_is_the_queues_events_key(conn: echomq.Connection, queue: str) -> None:
    assert channel(conn, queue) == f"emq:{{{queue}}}:events"


def test_publish_and_subscribe_round_trip(
    conn: echomq.Connection, queue: str, listener: Any
) -> None:
    assert echomq.publish(conn, queue, "cancel", job_id="17", reason="why") == 1
    assert echomq.publish(conn, queue, "ping") == 1
    assert received(listener) == [Event("cancel", "17", "why"), Event("ping")]


def test_a_publish_with_nobody_listening_is_lost(conn: echomq.Connection, queue: str) -> None:
    assert echomq.publish(conn, queue, "cancel", job_id="1") == 0


@pytest.mark.parametrize(
    "event", [Event("added"), Event("cancel", "a-1", None), Event("cancel", "9", "r é")]
)
def test_encode_and_decode_are_inverse(event: Event) -> None:
    assert Event.decode(event.encode()) == event
    assert Event.decode(event.encode().encode()) == event


@pytest.mark.parametrize(
    "junk",
    [
        "", "not json", "{", "[]", "[1, 2]", "42", "null", '"event"', "{}",
        '{"job": "1"}', '{"event": 5}', '{"event": null}', '{"event": ["cancel"]}',
        b"\xff\xfe", b"",
    ],
)
def test_decode_ignores_junk(junk: str | bytes) -> None:
    assert Event.decode(junk) is None


def test_an_add_to_an_empty_queue_announces_it(
    conn: echomq.Connection, queue: str, listener: Any
) -> None:
    echomq.add(conn, queue, {"n": 1})
    assert received(listener) == [Event("added")]
    echomq.add(conn, queue, {"n": 2})  # not empty: nobody needs waking
    assert received(listener) == []


def test_a_batch_into_an_empty_queue_announces_once(
    conn: echomq.Connection, queue: str, listener: Any
) -> None:
    echomq.add_many(conn, queue, [{"n": i} for i in range(5)])
    assert received(listener) == [Event("added")]


def test_the_added_event_is_plain_json(
    conn: echomq.Connection, queue: str, listener: Any
) -> None:
    echomq.add(conn, queue, {"n": 1})
    message = wait_until(lambda: listener.get_message(timeout=0.1))
    assert (message["channel"], json.loads(message["data"])) == (
        channel(conn, queue), {"event": "added"},
    )
