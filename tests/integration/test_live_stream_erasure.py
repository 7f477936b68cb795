"""The live stream when the thread it follows is erased (and perhaps created again) under it: every cycle
still in flight is closed, and nothing of another lineage is folded onto what was sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from om_api.sse import event_stream
from om_core.application.append import append_messages, configure_thread
from om_core.application.deps import Deps
from om_core.application.erase import erase_thread
from om_core.application.repository import load_state
from om_core.application.streams import thread_stream_id
from om_core.bootstrap import build_deps
from tests.integration.test_engine_invariants import PROFILE, HeldTasks

TENANT = "live"
THREAD = "t"
STREAM = thread_stream_id(TENANT, THREAD)


@pytest.fixture
def deps(tmp_path: Path) -> Iterator[Deps]:
    # background work is held, so the buffer run a burst of messages asks for stays in flight
    yield build_deps(
        database_url=f"sqlite:///{tmp_path / 'om.sqlite3'}",
        dispatcher=HeldTasks(),
        profile=PROFILE,
        migrate=True,
    )


def _turns(deps: Deps, first: int, count: int) -> None:
    for i in range(first, first + count):
        text = f"My colleague number {i} is called Person{i} and works in Office {i * 7} on floor {i % 9}."
        append_messages(
            deps, tenant=TENANT, thread_id=THREAD, messages=[{"id": f"u{i}", "role": "user", "content": text}]
        )


def _parts(chunks: list[str]) -> list[tuple[dict[str, Any], str | None]]:
    """(part, the id sent with it) of every data message."""
    out: list[tuple[dict[str, Any], str | None]] = []
    for chunk in chunks:
        for message in chunk.split("\n\n"):
            lines = message.split("\n")
            data = [line[len("data: ") :] for line in lines if line.startswith("data: ")]
            ids = [line[len("id: ") :] for line in lines if line.startswith("id: ")]
            if data:
                out.append((json.loads(data[0]), ids[0] if ids else None))
    return out


async def _follow(deps: Deps, between: Callable[[], object]) -> list[str]:
    """Everything a live stream sends when ``between`` runs while it is polling (with nothing new to
    send), read until the stream ends by itself or five seconds pass."""

    async def connected() -> bool:
        return False

    stream = event_stream(
        deps,
        STREAM,
        last_position=None,
        is_disconnected=connected,
        poll_interval=0.01,
        max_seconds=5.0,
    )
    chunks: list[str] = []

    async def read() -> None:
        async for chunk in stream:
            chunks.append(chunk)

    reading = asyncio.create_task(read())
    await asyncio.sleep(0.1)
    between()
    await reading
    return chunks


def _open_cycles(deps: Deps) -> list[str]:
    state = load_state(deps.records, deps.store, STREAM)
    return [
        f.cycle_id for f in (state.buffer_in_flight, state.sync_in_flight, state.reflection_in_flight) if f
    ]


def test_erasure_closes_the_cycles_in_flight_and_ends_the_stream(deps: Deps) -> None:
    configure_thread(deps, tenant=TENANT, thread_id=THREAD)
    _turns(deps, 0, 5)
    in_flight = _open_cycles(deps)
    assert in_flight, "the scenario needs a cycle in flight"

    chunks = asyncio.run(_follow(deps, lambda: erase_thread(deps, tenant=TENANT, thread_id=THREAD)))
    parts = _parts(chunks)
    assert [p["id"] for p, _ in parts] == in_flight
    for part, _ in parts:
        assert part["type"].endswith("-end")
        assert part["data"]["discarded"] is True and part["data"]["reason"] == "the thread was erased"
    # the last part names position 0: resuming from it answers 404, or replays a re-created thread
    assert parts[-1][1] == "0" and all(sent is None for _, sent in parts[:-1])
    # and they are the last thing the stream sent: it ended right after them
    assert _parts(chunks[-1:]) == parts


def test_a_thread_created_again_is_not_folded_onto_the_erased_one(deps: Deps) -> None:
    configure_thread(deps, tenant=TENANT, thread_id=THREAD)
    _turns(deps, 0, 5)
    in_flight = _open_cycles(deps)
    assert in_flight, "the scenario needs a cycle in flight"
    old_version = load_state(deps.records, deps.store, STREAM).version

    def erase_and_recreate() -> None:
        erase_thread(deps, tenant=TENANT, thread_id=THREAD)
        configure_thread(deps, tenant=TENANT, thread_id=THREAD)
        _turns(deps, 100, 8)  # more events than the erased lineage had
        assert load_state(deps.records, deps.store, STREAM).version > old_version

    chunks = asyncio.run(_follow(deps, erase_and_recreate))
    # only the old lineage's open cycles, closed; no part of the new thread, whose events would not fold
    # onto the old state (and whose own stream replays them from its start)
    parts = _parts(chunks)
    assert [p["id"] for p, _ in parts] == in_flight
    assert all(p["data"]["reason"] == "the thread was erased" for p, _ in parts)
    assert _parts(chunks[-1:]) == parts
