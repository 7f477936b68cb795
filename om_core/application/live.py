"""Use case: follow a record live, event by event, from a resume point (the HTTP API's server-sent events
frame and pace what it returns).

A follower reads the record's events after the last version it was sent. Within one stream versions are
dense and commit in order (each append compare-and-sets on the previous version), so reading by version
never skips a late-committing event.

Erasure: each poll re-reads the last event sent along with the new ones. When it is gone (the thread was
erased, and perhaps created again: a new lineage has new positions), the poll says so, and the follower's
closing parts close every cycle still in flight, as discarded. Nothing of a new lineage is ever folded onto
the old one's state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from om_core.application.configuration import record_config
from om_core.application.deps import Deps
from om_core.application.profiles import profile_layer, record_profile
from om_core.application.repository import load_state
from om_core.application.streams import tenant_of
from om_core.domain.envelope import RecordedEvent
from om_core.domain.events import from_recorded
from om_core.domain.parts import Part, changes_status, erased_parts, event_parts, status_part
from om_core.domain.state import RecordState, fold, initial_state
from om_core.domain.timeutil import format_time

PAGE = 500


@dataclass
class Follower:
    """Where a live reader of a stream stands: the state as of the last event it was sent, that event's
    version and its global position (0: none, or not known yet)."""

    stream_id: str
    profile: Mapping[str, Any]
    state: RecordState
    version: int
    position: int
    # the thread the stream was opened for: a resource record's status parts name it
    thread_id: str | None = None


@dataclass(frozen=True)
class LiveEvent:
    """One event as the follower sends it: its lifecycle parts, then the status after it when it changed."""

    position: int
    event_type: str
    parts: list[Part]


@dataclass(frozen=True)
class LivePage:
    events: list[LiveEvent]
    # a full page: more may be waiting already, so poll again at once
    full: bool


def follow(deps: Deps, stream_id: str, last_position: int | None, thread_id: str | None = None) -> Follower:
    """A follower of ``stream_id``. Without a resume point it starts live, from the current projection;
    with one, from a fresh fold of the events up to and including the one at ``last_position`` (positions
    rise within a stream), so a resumed follower repeats nothing."""
    if last_position is None:
        state = load_state(deps.records, deps.store, stream_id)
        return Follower(stream_id, _layer(deps, state), state, state.version, state.position, thread_id)
    state = initial_state(stream_id)
    version = position = 0
    while True:
        page = deps.store.read_stream(stream_id, after_version=version, limit=PAGE)
        upto = [r for r in page if r.global_position <= last_position]
        if upto:
            state = fold(state, [from_recorded(r) for r in upto], version=upto[-1].stream_version)
            version, position = upto[-1].stream_version, upto[-1].global_position
        if len(upto) < len(page) or len(page) < PAGE:
            return Follower(stream_id, _layer(deps, state), state, version, position, thread_id)


def _layer(deps: Deps, state: RecordState) -> Mapping[str, Any]:
    """The record's profile, resolved once per follower: what its parts are described with."""
    return profile_layer(deps, tenant_of(state.stream_id), record_profile(state))


def poll(deps: Deps, follower: Follower) -> LivePage | None:
    """The events committed since what ``follower`` was sent, each with its parts, and the follower moved
    past them; None when the event it was last sent is no longer there (erased, or another lineage's event
    at that version). Raises StoreUnavailableError, the follower unmoved."""
    since = _since_sent(deps, follower)
    if since is None:
        return None
    page, follower.position = since
    events: list[LiveEvent] = []
    for recorded in page:
        event = from_recorded(recorded)
        after = fold(follower.state, [event], version=recorded.stream_version)
        config = record_config(follower.profile, after)
        parts = event_parts(event, follower.state, after, config)
        if changes_status(event):
            reader = follower.thread_id if after.thread_id is None else None
            parts.append(status_part(after, config, reader_thread=reader))
        events.append(LiveEvent(recorded.global_position, event.event_type, parts))
        follower.state, follower.version = after, recorded.stream_version
        follower.position = recorded.global_position
    return LivePage(events, full=len(page) == PAGE)


def closing_parts(follower: Follower, at: datetime) -> list[Part]:
    """What closes the cycles in flight when the followed record was erased: no event records an erasure,
    so the follower closes them."""
    return erased_parts(follower.state, format_time(at))


def _since_sent(deps: Deps, follower: Follower) -> tuple[list[RecordedEvent], int] | None:
    """The events after the follower's version and the position of the one at it; None when that one is
    gone."""
    version, position = follower.version, follower.position
    if version == 0:
        return deps.store.read_stream(follower.stream_id, after_version=0, limit=PAGE), 0
    page = deps.store.read_stream(follower.stream_id, after_version=version - 1, limit=PAGE + 1)
    if not page or page[0].stream_version != version or position not in (0, page[0].global_position):
        return None
    return page[1:], page[0].global_position
