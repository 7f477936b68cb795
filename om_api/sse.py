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
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool

from om_core.application.ports import EventStore, StoreUnavailableError
from om_core.application.records import load_state, record_config
from om_core.domain.config import MemoryConfig
from om_core.domain.envelope import RecordedEvent
from om_core.domain.events import DomainEvent, from_recorded
from om_core.domain.parts import changes_status, event_parts, status_part
from om_core.domain.state import RecordState, fold, initial_state

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


def starting_state(store: EventStore, stream_id: str, last_position: int | None) -> tuple[RecordState, int]:
    """The state to fold from and the version it reflects.

    Without a resume point the stream starts live: from the current projection. With one, from a fresh
    fold of the events up to and including the one at ``last_position`` (positions rise within a stream).
    """
    if last_position is None:
        state = load_state(store, stream_id)
        return state, state.version
    state = initial_state(stream_id)
    version = 0
    while True:
        page = store.read_stream(stream_id, after_version=version, limit=PAGE)
        upto = [r for r in page if r.global_position <= last_position]
        if upto:
            state = fold(state, [from_recorded(r) for r in upto], version=upto[-1].stream_version)
            version = upto[-1].stream_version
        if len(upto) < len(page) or len(page) < PAGE:
            return state, version


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
    state, version = await run_in_threadpool(starting_state, store, stream_id, last_position)
    # how soon to reconnect; no initial snapshot part, so a resumed stream repeats nothing
    yield "retry: 1000\n\n"
    started = last_beat = time.monotonic()
    while True:
        if await is_disconnected():
            return
        try:
            page = await run_in_threadpool(store.read_stream, stream_id, version, PAGE)
        except StoreUnavailableError:
            page = []  # keep the connection; the next poll tries again
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
            state, version = after, recorded.stream_version
        now = time.monotonic()
        if max_seconds is not None and now - started >= max_seconds:
            return
        if page and len(page) == PAGE:
            continue
        if now - last_beat >= heartbeat_interval:
            last_beat = now
            yield ": ping\n\n"
        await asyncio.sleep(poll_interval)
