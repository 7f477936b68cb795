"""Webhooks end to end (docs/operations.md, Webhooks): the profile's webhook, a real worker process
delivering from the outbox, and a real HTTP receiver on loopback that checks every signature, including
one that is down for a while and comes back: every lifecycle event arrives, none under two ids."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from om_core.application.append import append_messages
from om_core.application.context import get_context
from om_core.application.projections import rebuild_projections
from om_core.domain.config import parse_memory_config
from om_core.domain.events import from_recorded
from om_core.domain.parts import parts_for_events
from om_core.domain.state import initial_state
from om_core.domain.webhooks import (
    EVENT_HEADER,
    ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    delivery_id,
    lifecycle_names,
    verify,
)
from testing.processes import free_port, om_worker_process, wait_for

from .conftest import TENANT, Cluster, message

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SECRET = "whsec-test-0123456789abcdef"
# the receiver's replay window: a delivery stamped further from its clock is refused
TOLERANCE_SECONDS = 300


@dataclass
class Received:
    delivery_id: str
    event: str
    body: dict[str, Any]
    raw: bytes


@dataclass
class Receiver:
    """A webhook endpoint on a fixed loopback port that can go down and come back."""

    port: int
    received: list[Received] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/om"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                stamp = int(self.headers[TIMESTAMP_HEADER])
                signed = verify(SECRET, stamp, raw, self.headers[SIGNATURE_HEADER])
                fresh = abs(time.time() - stamp) <= TOLERANCE_SECONDS
                with receiver._lock:
                    if signed and fresh and self.path == "/hooks/om":
                        body = json.loads(raw)
                        receiver.received.append(
                            Received(self.headers[ID_HEADER], self.headers[EVENT_HEADER], body, raw)
                        )
                        status = 204
                    else:
                        receiver.refused.append(self.headers[ID_HEADER])
                        status = 401
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def ids(self) -> set[str]:
        with self._lock:
            return {r.delivery_id for r in self.received}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver(free_port())
    yield made
    made.stop()


def _expected(cluster: Cluster, thread: str) -> dict[str, tuple[str, str]]:
    """Every lifecycle event the stream stands for, by the id it must be delivered under."""
    stream = cluster.stream(thread)
    recorded = cluster.deps.store.read_stream(stream)
    events = [from_recorded(r) for r in recorded]
    config = parse_memory_config(cluster.profile)
    out: dict[str, tuple[str, str]] = {}
    for index, parts in parts_for_events(initial_state(stream), events, config, status_after_each=False):
        named = [(name, part) for part in parts for name in lifecycle_names(part)]
        for position, (name, part) in enumerate(named):
            out[delivery_id(recorded[index].event_id, position, name)] = (name, str(part["id"]))
    return out


def _settled(cluster: Cluster, thread: str) -> bool:
    state = cluster.state(thread)
    return (
        state.buffer_in_flight is None and state.sync_in_flight is None and state.reflection_in_flight is None
    )


def _converse(cluster: Cluster, thread: str, turns: int) -> list[float]:
    """Append and read ``turns`` turns; the time each append took."""
    took: list[float] = []
    for turn in range(turns):
        pair = [message(thread, 2 * turn), message(thread, 2 * turn + 1, role="assistant")]
        started = time.perf_counter()
        append_messages(cluster.deps, tenant=TENANT, thread_id=thread, messages=pair)
        took.append(time.perf_counter() - started)
        get_context(cluster.deps, tenant=TENANT, thread_id=thread)
    return took


def _metric(port: int, name: str, **labels: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def _cluster(cluster_factory: Any, receiver: Receiver) -> tuple[Cluster, int]:
    cluster: Cluster = cluster_factory()
    # the secret in the worker's environment, not in the profile file
    cluster.profile["webhooks"] = [{"url": receiver.url, "secretEnv": "OM_TEST_WEBHOOK_SECRET"}]
    cluster.profile["reflection"] = {"observationTokens": 1_500}
    port = free_port()
    env = cluster.env(
        OM_TEST_WEBHOOK_SECRET=SECRET,
        OM_WORKER_METRICS_PORT=str(port),
        OM_WORKER_WEBHOOK_BACKOFF_MAX="1",
        OM_WORKER_WEBHOOK_TIMEOUT="2",
        OM_WORKER_WEBHOOK_MAX_RETRIES="60",
    )
    worker = om_worker_process("hooks", env, cluster.tmp, concurrency=2)
    cluster.processes.append(worker)
    worker.start()
    return cluster, port


def _check_deliveries(receiver: Receiver, expected: dict[str, tuple[str, str]]) -> None:
    assert receiver.refused == []
    # at least once, and under one id each: the same id always carries the same body
    bodies: dict[str, bytes] = {}
    for item in receiver.received:
        assert bodies.setdefault(item.delivery_id, item.raw) == item.raw
        assert item.body["id"] == item.delivery_id and item.body["type"] == item.event
        assert item.body["tenant"] == TENANT
    assert set(bodies) == set(expected)
    # no lifecycle event under two ids: one id per (event name, stored event, cycle)
    ids_of: dict[tuple[str, str, str], set[str]] = {}
    for item in receiver.received:
        key = (item.event, item.body["eventId"], str(item.body["data"].get("cycleId")))
        ids_of.setdefault(key, set()).add(item.delivery_id)
    assert all(len(ids) == 1 for ids in ids_of.values())
    for item in receiver.received:
        name, _ = expected[item.delivery_id]
        assert item.event == name


def test_every_lifecycle_event_is_delivered_signed_once_per_id(
    cluster_factory: Any, receiver: Receiver
) -> None:
    receiver.start()
    cluster, port = _cluster(cluster_factory, receiver)
    thread = cluster.new_thread()
    _converse(cluster, thread, 30)
    wait_for(lambda: _settled(cluster, thread), 60, what="background work to finish")
    expected = _expected(cluster, thread)
    names = {name for name, _ in expected.values()}
    assert {"buffering.start", "buffering.end", "activation"} <= names
    wait_for(lambda: receiver.ids() >= set(expected) or None, 60, what="every delivery")
    _check_deliveries(receiver, expected)
    ends = [r for r in receiver.received if r.event == "buffering.end"]
    # a chunk's end says what it cost (a discarded one, closed by another cycle, has usage null)
    chunks = [r for r in ends if not r.body["data"].get("discarded")]
    assert chunks and all(r.body["data"]["usage"]["model"] == "om-local/extractive" for r in chunks)
    assert _metric(port, "om_webhook_deliveries_total", result="delivered") >= len(expected)
    assert rebuild_projections(cluster.deps.records, cluster.deps.store, verify_only=True).mismatched == []


def test_a_receiver_that_is_down_gets_every_event_once_it_is_back(
    cluster_factory: Any, receiver: Receiver
) -> None:
    cluster, port = _cluster(cluster_factory, receiver)
    thread = cluster.new_thread()
    took = _converse(cluster, thread, 30)
    # nothing waits on the receiver: an append only writes the outbox rows
    assert max(took) < 2.0
    wait_for(lambda: _settled(cluster, thread), 60, what="background work to finish")
    expected = _expected(cluster, thread)
    wait_for(
        lambda: _metric(port, "om_webhook_deliveries_total", result="retried") >= len(expected) or None,
        60,
        what="the deliveries to be retried",
    )
    assert receiver.received == []
    receiver.start()
    wait_for(
        lambda: receiver.ids() >= set(expected) or None,
        90,
        what="every delivery after the receiver came back",
    )
    _check_deliveries(receiver, expected)
    time.sleep(2)
    # nothing more arrives under an id the stream does not stand for, and nothing failed for good
    assert receiver.ids() == set(expected)
    assert _metric(port, "om_webhook_deliveries_total", result="failed") == 0
    # every stream folds from its events to exactly its stored state
    assert rebuild_projections(cluster.deps.records, cluster.deps.store, verify_only=True).mismatched == []
