"""The live stream of a thread's ``data-om-*`` parts as server-sent events.

Polling, not notifications: the reader polls its follower of the record (om_core/application/live.py) for
the events after the last one it sent every ``poll_interval`` (a NOTIFY in every append would serialise
commits, service.md §8), so there is no notification connection whose loss could stall it.

Framing: each SSE event carries every part of one domain event (its lifecycle parts, then the status after
it) as consecutive ``data:`` messages, and only the last one carries ``id: <global position>``. A client's
Last-Event-ID therefore only ever names a fully delivered event; resuming from it replays nothing and
loses nothing. Heartbeats are SSE comments.

Erasure: when the follower finds the last event sent gone, the stream sends its closing parts, the last
with ``id: 0`` (a resume then finds the thread gone, or replays the new lineage from its start), and ends.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

from starlette.concurrency import run_in_threadpool

from om_core.application.deps import Deps
from om_core.application.live import Follower, LivePage, closing_parts, follow, poll
from om_core.application.ports import StoreUnavailableError


def format_sse(part: dict[str, Any], event_id: int | None = None) -> str:
    payload = json.dumps(part, ensure_ascii=False, separators=(",", ":"))
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}data: {payload}\n\n"


async def event_stream(
    deps: Deps,
    stream_id: str,
    *,
    last_position: int | None,
    is_disconnected: Callable[[], Any],
    poll_interval: float = 0.15,
    heartbeat_interval: float = 15.0,
    max_seconds: float | None = None,
    thread_id: str | None = None,
) -> AsyncIterator[str]:
    follower = await run_in_threadpool(follow, deps, stream_id, last_position, thread_id)
    # how soon to reconnect; no initial snapshot part, so a resumed stream repeats nothing
    yield "retry: 1000\n\n"
    started = last_beat = time.monotonic()
    while True:
        if await is_disconnected():
            return
        try:
            page: LivePage | None = await run_in_threadpool(poll, deps, follower)
        except StoreUnavailableError:
            page = LivePage([], full=False)  # keep the connection; the next poll tries again
        if page is None:
            yield _erased(follower)
            return
        for event in page.events:
            if event.parts:
                yield "".join(
                    format_sse(part, event.position if i == len(event.parts) - 1 else None)
                    for i, part in enumerate(event.parts)
                )
            else:
                # no part for this event, but the id still moves so a resume does not re-read it
                yield f"id: {event.position}\n: {event.event_type}\n\n"
        now = time.monotonic()
        if max_seconds is not None and now - started >= max_seconds:
            return
        if page.full:
            continue
        if now - last_beat >= heartbeat_interval:
            last_beat = now
            yield ": ping\n\n"
        await asyncio.sleep(poll_interval)


def _erased(follower: Follower) -> str:
    """The closing parts of what was in flight when the thread was erased; the last carries ``id: 0``."""
    parts = closing_parts(follower, datetime.now(UTC))
    if not parts:
        return "id: 0\n: erased\n\n"
    return "".join(format_sse(part, 0 if i == len(parts) - 1 else None) for i, part in enumerate(parts))
