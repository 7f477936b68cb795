"""Loading a record: its stored row and window, or a fresh fold of its events (cosmicpython's repository)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import TypeAdapter, ValidationError

from om_core.application.ports import EventStore, RecordProjection
from om_core.application.state_cache import StateCache
from om_core.domain.envelope import StateSnapshot, StoredMessage, StoredSnapshot
from om_core.domain.events import from_recorded
from om_core.domain.state import (
    InvariantViolation,
    LogSegment,
    RecordState,
    fold,
    initial_state,
    window_message,
)
from om_core.domain.timeutil import format_time

_LOG_SEGMENTS = TypeAdapter(list[LogSegment])

# Called with (stream id, why) each time a read folds a stream from its events instead of reading its row:
# metrics count them (in normal operation there are none, since every commit writes the row).
REPLAY_LISTENERS: list[Callable[[str, str], None]] = []


def load_state(
    records: RecordProjection, store: EventStore, stream_id: str, cache: StateCache | None = None
) -> RecordState:
    """The record's inline projection: one row, whatever the length of the stream. The caller owns it.

    Every commit writes it in the same transaction as its events, so it is never behind them, and the row
    and the window's messages are read from one snapshot. A stream without one (its projection was
    dropped, or written by an older shape of the state) is folded from its events, read from ``store``.
    With a ``cache`` that holds the stream's current state, only the row's position is read; one that holds
    a state a few events behind (another process wrote since) gets those events and folds them onto it.
    """
    held = cache.latest(stream_id) if cache is not None else None
    if held is None:
        stored = records.load_snapshot(stream_id)
    else:
        stored = records.load_snapshot(stream_id, known_position=held.position, known_version=held.version)
    if stored is None:
        # an unknown stream is an empty state; a stream with events but no row is a dropped projection
        return _replayed(store, stream_id, "no record row")
    if stored.events is not None and held is not None and cache is not None:
        caught_up = _caught_up(held, stored)
        if caught_up is not None:
            cache.keep(stream_id, stored.position, caught_up)
            return caught_up.fork()
        stored = records.load_snapshot(stream_id)
        if stored is None:
            return _replayed(store, stream_id, "no record row")
    if stored.state is None and cache is not None:
        held = cache.take(stream_id, stored.position)
        if held is not None:
            return held
        # evicted between the two calls
        stored = records.load_snapshot(stream_id)
        if stored is None:
            return _replayed(store, stream_id, "no record row")
    assert stored.state is not None
    try:
        state = RecordState.model_validate_json(stored.state)
    except ValidationError:
        # written by an older shape of the state: snapshots are a cache, the events are the truth
        return _replayed(store, stream_id, "state of an older shape")
    state.version = stored.version
    state.position = stored.position
    if stored.log is not None:
        try:
            state.log = _LOG_SEGMENTS.validate_json(stored.log)
        except ValidationError:
            return _replayed(store, stream_id, "log of an older shape")
        state.mark_log_stored()
    restored = _with_window_messages(state, stored.window or ())
    if restored is None:
        return _replayed(store, stream_id, "window rows incomplete")
    state = restored
    if cache is None:
        return state
    cache.keep(stream_id, stored.position, state)
    return state.fork()


def _caught_up(held: RecordState, stored: StoredSnapshot) -> RecordState | None:
    """The state held, moved on by the events written since (another process's commits), as the row names
    it; None if they do not lead exactly there."""
    assert stored.events is not None
    if not stored.events or stored.events[-1].global_position != stored.position:
        return None
    try:
        state = fold(held, [from_recorded(r) for r in stored.events], version=stored.version)
    except InvariantViolation:
        return None
    state.position = stored.position
    return state


def _replayed(store: EventStore, stream_id: str, reason: str) -> RecordState:
    state = replay_state(store, stream_id)
    if state.version > 0:
        for listener in REPLAY_LISTENERS:
            listener(stream_id, reason)
    return state


def _with_window_messages(state: RecordState, rows: Sequence[StoredMessage]) -> RecordState | None:
    """The state with its unobserved messages put back from the message projection (``snapshot_of`` leaves
    them out), or None when the projection does not hold exactly the messages the window needs."""
    messages = [
        window_message(
            seq=row.seq,
            message_id=row.message_id,
            role=row.role,
            thread_id=row.thread_id,
            tokens=row.tokens,
            created_at=format_time(row.created_at),
            model=row.message.get("model"),
            message=row.message,
        )
        for row in rows
    ]
    window = sorted([*messages, *state.window], key=lambda m: m.seq)
    if [m.seq for m in window] != list(range(state.observed_seq + 1, state.next_seq)):
        return None
    state.window = window
    return state


def replay_state(store: EventStore, stream_id: str, to_version: int | None = None) -> RecordState:
    """A fresh fold of the stream's first ``to_version`` events, ignoring every stored projection."""
    events = store.read_stream(stream_id, after_version=0, limit=to_version)
    state = initial_state(stream_id)
    if events:
        state = fold(state, [from_recorded(r) for r in events], version=events[-1].stream_version)
        state.position = events[-1].global_position
    return state


def snapshot_of(state: RecordState, tenant: str) -> StateSnapshot:
    """The record's row, whose size does not grow with the conversation.

    The window's messages stay out of it: they are rows of the message projection, written in the same
    transaction (temporal markers, which have no message row, stay in). The observation log travels apart
    and only when the row does not hold it already: most appends leave it alone.
    """
    markers = [m for m in state.window if m.kind == "marker"]
    log = None if state.log_matches_row() else _LOG_SEGMENTS.dump_json(state.log).decode()
    return StateSnapshot(
        state=state.model_copy(update={"window": markers, "log": []}).model_dump_json(),
        tenant=tenant,
        thread_id=state.thread_id,
        resource_id=state.resource_id,
        pending_work=state.has_work_pending,
        log=log,
        observed_seq=state.observed_seq,
    )
