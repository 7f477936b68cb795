"""The live stream against a real uvicorn server on 127.0.0.1: every lifecycle event arrives as its
data-om-* part, in order, exactly once across forced reconnects (Last-Event-ID), with heartbeats."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from om_api.client import AsyncOMClient, OMClient, OMError, PartGrouper, StreamPart
from om_api.demo.conversation import synthetic_conversation
from om_core.application.configuration import record_config
from om_core.application.deps import Deps
from om_core.application.streams import thread_stream_id
from om_core.domain.events import from_recorded
from om_core.domain.parts import PART_TYPES, parts_for_events
from om_core.domain.state import initial_state
from testing.processes import serve_in_thread

from .conftest import build

THREAD = "live"


@pytest.fixture(scope="module")
def server(pg_url: str) -> Iterator[tuple[str, Deps, Any]]:
    app, deps, dispatcher = build(pg_url)
    try:
        with serve_in_thread(app, lifespan="on") as base:
            yield base, deps, dispatcher
    finally:
        dispatcher.close()


def _expected(deps: Deps, tenant: str) -> list[dict[str, Any]]:
    stream_id = thread_stream_id(tenant, THREAD)
    events = [from_recorded(r) for r in deps.store.read_stream(stream_id)]
    state = initial_state(stream_id)
    out: list[dict[str, Any]] = []
    from om_core.domain.state import fold

    final = fold(state, events)
    config = record_config(deps.profile, final)
    for _, parts in parts_for_events(state, events, config):
        out.extend(parts)
    return out


def test_stream_resumes_without_loss_or_repeat(server: tuple[str, Deps, Any]) -> None:
    url, deps, dispatcher = server
    writer_done = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with OMClient(url, "key-alpha") as om:
                om.put_thread(THREAD, resource_id="r1")
                for turn in synthetic_conversation(30, seed=5):
                    om.append(THREAD, [turn.user])
                    om.context(THREAD)
                    om.append(THREAD, [turn.assistant])
            dispatcher.drain()
            with OMClient(url, "key-alpha") as om:
                om.context(THREAD)
        except BaseException as error:  # surfaced by the assertion below
            errors.append(error)
        finally:
            writer_done.set()

    with OMClient(url, "key-alpha") as om:
        om.put_thread(THREAD, resource_id="r1")
    threading.Thread(target=write, daemon=True).start()

    received: list[StreamPart] = []
    last: int | None = 0
    reconnects = 0
    quiet_since = None
    # read in short sessions: each one is cut after a few parts and resumed from the last id seen
    headers = {"Authorization": "Bearer key-alpha"}
    with httpx.Client(base_url=url, headers=headers, timeout=10) as http:
        while True:
            grouper = PartGrouper(None if last is None else str(last))
            taken = 0
            deadline = time.monotonic() + 1.0
            with http.stream(
                "GET", f"/v1/threads/{THREAD}/stream", headers={"Last-Event-ID": str(last)}
            ) as r:
                assert r.status_code == 200
                grouper.restart()
                for line in r.iter_lines():
                    for part in grouper.feed(line):
                        received.append(part)
                        taken += 1
                    last = int(grouper.last) if grouper.last is not None else last
                    # cut the connection mid-stream: after a few parts, or after a second of quiet
                    if taken >= 7 or time.monotonic() > deadline:
                        break
            reconnects += 1
            if writer_done.is_set() and len(received) >= len(_expected(deps, "alpha")):
                break
            if writer_done.is_set():
                quiet_since = quiet_since or time.monotonic()
                assert time.monotonic() - quiet_since < 60, "stream stalled"
    assert not errors, errors
    expected = _expected(deps, "alpha")
    got = [{"type": p.type, "id": p.id, "data": p.data} for p in received]
    for i, (a, b) in enumerate(zip(got, expected, strict=False)):
        assert a == b, (
            i,
            a["type"],
            b["type"],
            {
                k: (a["data"].get(k), b["data"].get(k))
                for k in set(a["data"]) | set(b["data"])
                if a["data"].get(k) != b["data"].get(k)
            },
        )
    assert got == expected
    assert reconnects > 5
    kinds = {p.type for p in received}
    assert {
        "data-om-status",
        "data-om-buffering-start",
        "data-om-buffering-end",
        "data-om-activation",
    } <= kinds
    assert kinds <= set(PART_TYPES)
    for part in received:
        if part.type not in ("data-om-status", "data-om-thread-update"):
            assert "cycleId" in part.data and "recordId" in part.data


def test_heartbeat_and_async_client(server: tuple[str, Deps, Any]) -> None:
    url, _, _ = server
    headers = {"Authorization": "Bearer key-alpha"}
    with (
        httpx.Client(base_url=url, headers=headers) as http,
        http.stream("GET", f"/v1/threads/{THREAD}/stream", timeout=5) as r,
    ):
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        started = time.monotonic()
        for line in r.iter_lines():
            if line == ": ping":
                break
            assert time.monotonic() - started < 5
    import asyncio

    async def run() -> None:
        async with AsyncOMClient(url, "key-alpha") as om:
            ctx = await om.context(THREAD, format="openai")
            assert ctx["messages"]
            parts = []
            async for part in om.stream(THREAD, last_event_id=0):
                parts.append(part)
                if len(parts) >= 3:
                    break
            assert parts[0].type.startswith("data-om-")
            with pytest.raises(OMError) as info:
                await om.context("missing-thread")
            assert info.value.status == 404 and info.value.code == "thread_not_found"

    asyncio.run(run())


def test_readyz_metrics_and_auth_over_real_server(server: tuple[str, Deps, Any]) -> None:
    url, _, _ = server
    assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{url}/readyz")
    assert ready.status_code == 200 and ready.json()["checks"]["database"] == "ok"
    assert "om_http_requests" in httpx.get(f"{url}/metrics").text
    assert httpx.get(f"{url}/v1/threads").status_code == 401
    assert "<title>om" in httpx.get(f"{url}/ui").text
