"""Use cases reading a record's history: its events page by page, and its observation log as it stood at
the end of any generation."""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass

from om_core.application.deps import Deps
from om_core.application.repository import replay_state
from om_core.application.streams import RecordNotFoundError, thread_stream_id
from om_core.application.threads import record_state, record_stream
from om_core.domain.envelope import RecordedEvent
from om_core.domain.events import EVENT_CLASSES
from om_core.domain.state import RecordState


class UnknownEventTypeError(ValueError):
    def __init__(self, unknown: list[str]) -> None:
        super().__init__(f"unknown event type(s): {', '.join(unknown)}")
        self.unknown = unknown
        self.known = sorted(EVENT_CLASSES)


class GenerationNotFoundError(LookupError):
    def __init__(self, generation: int) -> None:
        super().__init__(f"generation {generation} does not exist yet")
        self.generation = generation


@dataclass(frozen=True)
class EventPage:
    """``next_after`` is the version to read on from, None once the stream is read to its end."""

    events: list[RecordedEvent]
    next_after: int | None


def read_events(
    deps: Deps,
    *,
    tenant: str,
    thread_id: str,
    after: int = 0,
    limit: int = 100,
    types: Set[str] | None = None,
) -> EventPage:
    """Up to ``limit`` events of the thread's record after version ``after``, of ``types`` when given
    (an empty set matches none). Raises UnknownEventTypeError, RecordNotFoundError."""
    stream_id = record_stream(deps, tenant=tenant, thread_id=thread_id)
    unknown = sorted(set(types or ()) - set(EVENT_CLASSES))
    if unknown:
        raise UnknownEventTypeError(unknown)
    if deps.store.stream_version(stream_id) == 0:
        raise RecordNotFoundError(thread_stream_id(tenant, thread_id))
    out: list[RecordedEvent] = []
    cursor = after
    exhausted = False
    # a type filter may skip most events: keep reading pages until the page is full or the stream ends
    while len(out) < limit and not exhausted:
        page = deps.store.read_stream(stream_id, after_version=cursor, limit=limit)
        exhausted = len(page) < limit
        for recorded in page:
            cursor = recorded.stream_version
            if types is None or recorded.event_type in types:
                out.append(recorded)
                if len(out) >= limit:
                    break
    more = not exhausted or cursor < deps.store.stream_version(stream_id)
    return EventPage(out, cursor if more else None)


@dataclass(frozen=True)
class ObservationLog:
    """``shown`` is the record as of the generation asked for (``current`` when none was): its log,
    buffered work and work in flight. ``current`` lists every generation."""

    current: RecordState
    shown: RecordState


def observation_log(
    deps: Deps, *, tenant: str, thread_id: str, generation: int | None = None
) -> ObservationLog:
    """Raises GenerationNotFoundError for a generation not begun yet, RecordNotFoundError."""
    state = record_state(deps, tenant=tenant, thread_id=thread_id)
    if generation is None or generation == state.generation:
        return ObservationLog(state, state)
    if generation > state.generation:
        raise GenerationNotFoundError(generation)
    # a generation's final log is the state just before the reflection that ended it
    ended_at = state.generations[generation + 1].started_at_version
    return ObservationLog(state, replay_state(deps.store, state.stream_id, ended_at - 1))
