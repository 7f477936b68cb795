"""The live stream of a thread's ``data-om-*`` parts as server-sent events.

Polling, not notifications: the reader asks the store for the thread's events after the last version it
sent every ``poll_interval`` (a NOTIFY in every append would serialise commits, service.md §8), so there is no
notification connection whose loss could stall it. Within one stream versions are dense and commit in
order (each append compare-and-sets on the previous version), so reading by version never skips a
late-committing event.

Framing: each SSE event carries every part of one domain event (its lifecycle parts, then the status after
it) as consecutive ``data:`` messages, and only the last one carries ``id: <global position>``. A client's
Last-Event-ID therefore only ever names a fully delivered event; resuming from it replays nothing and
loses nothing. Heartbeats are SSE comments.

Erasure: each poll re-reads the last event sent along with the new ones. When it is gone (the thread was
erased, and perhaps created again: a new lineage has new positions), the stream closes every cycle still
in flight, as discarded, with ``id: 0`` (a resume then finds the thread gone, or replays the new
lineage from its start) and ends. Nothing of a new lineage is ever folded onto the old one's state.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

from starlette.concurrency import run_in_threadpool

from om_core.application.configuration import record_config
from om_core.application.ports import EventStore, StoreUnavailableError
from om_core.application.repository import load_state
from om_core.domain.config import MemoryConfig
from om_core.domain.envelope import RecordedEvent
from om_core.domain.events import DomainEvent, from_recorded
from om_core.domain.parts import changes_status, erased_parts, event_parts, status_part
from om_core.domain.state import RecordState, fold, initial_state
from om_core.domain.timeutil import format_time

PAGE = 500


def format_sse(part: dict[str, Any], event_id: int | None = None) -> str:
    payload = json.dumps(part, ensure_ascii=False, separators=(",", ":"))
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}data: {payload}\n\n"


def parts_of(
    recorded: RecordedEvent, event: DomainEvent, before: RecordState, after: RecordState, config: MemoryConfig
) -> list[dict[str, Any]]:
    parts = event_parts(event, before, after, config)
    if changes_status(event):
        parts.append(status_part(after, config))
    return parts


def starting_state(
    store: EventStore, stream_id: str, last_position: int | None
) -> tuple[RecordState, int, int]:
    """The state to fold from, the version it reflects and the position of the event at that version (0:
    none, or not known yet).

    Without a resume point the stream starts live: from the current projection. With one, from a fresh
    fold of the events up to and including the one at ``last_position`` (positions rise within a stream).
    """
    if last_position is None:
        state = load_state(store, stream_id)
        return state, state.version, state.position
    state = initial_state(stream_id)
    version = position = 0
    while True:
        page = store.read_stream(stream_id, after_version=version, limit=PAGE)
        upto = [r for r in page if r.global_position <= last_position]
        if upto:
            state = fold(state, [from_recorded(r) for r in upto], version=upto[-1].stream_version)
            version, position = upto[-1].stream_version, upto[-1].global_position
        if len(upto) < len(page) or len(page) < PAGE:
            return state, version, position


def _since_sent(
    store: EventStore, stream_id: str, version: int, position: int
) -> tuple[list[RecordedEvent], int] | None:
    """The events after ``version`` and the position of the one at ``version``; None when that one is
    no longer there (erased, or another lineage's event at that version)."""
    if version == 0:
        return store.read_stream(stream_id, after_version=0, limit=PAGE), 0
    page = store.read_stream(stream_id, after_version=version - 1, limit=PAGE + 1)
    if not page or page[0].stream_version != version or position not in (0, page[0].global_position):
        return None
    return page[1:], page[0].global_position


async def event_stream(
    store: EventStore,
    stream_id: str,
    profile: dict[str, Any],
    *,
    last_position: int | None,
    is_disconnected: Callable[[], Any],
    poll_interval: float = 0.15,
    heartbeat_interval: float = 15.0,
    max_seconds: float | None = None,
) -> AsyncIterator[str]:
    state, version, position = await run_in_threadpool(starting_state, store, stream_id, last_position)
    # how soon to reconnect; no initial snapshot part, so a resumed stream repeats nothing
    yield "retry: 1000\n\n"
    started = last_beat = time.monotonic()
    while True:
        if await is_disconnected():
            return
        try:
            since = await run_in_threadpool(_since_sent, store, stream_id, version, position)
        except StoreUnavailableError:
            since = [], position  # keep the connection; the next poll tries again
        if since is None:
            yield _erased(state)
            return
        page, position = since
        for recorded in page:
            event = from_recorded(recorded)
            after = fold(state, [event], version=recorded.stream_version)
            config = record_config(profile, after)
            parts = parts_of(recorded, event, state, after, config)
            if parts:
                chunk = "".join(
                    format_sse(part, recorded.global_position if i == len(parts) - 1 else None)
                    for i, part in enumerate(parts)
                )
            else:
                # no part for this event, but the id still moves so a resume does not re-read it
                chunk = f"id: {recorded.global_position}\n: {event.event_type}\n\n"
            yield chunk
            state, version, position = after, recorded.stream_version, recorded.global_position
        now = time.monotonic()
        if max_seconds is not None and now - started >= max_seconds:
            return
        if page and len(page) == PAGE:
            continue
        if now - last_beat >= heartbeat_interval:
            last_beat = now
            yield ": ping\n\n"
        await asyncio.sleep(poll_interval)


def _erased(state: RecordState) -> str:
    """The closing parts of what was in flight when the thread was erased; the last carries ``id: 0``."""
    parts = erased_parts(state, format_time(datetime.now(UTC)))
    if not parts:
        return "id: 0\n: erased\n\n"
    return "".join(format_sse(part, 0 if i == len(parts) - 1 else None) for i, part in enumerate(parts))
