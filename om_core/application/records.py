"""What every use case shares: dependencies, stream names, loading a record, planning and committing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from om_core.application.ports import ConcurrencyError, EventStore, ModelGateway, WorkDispatcher
from om_core.application.state_cache import StateCache
from om_core.domain import policy
from om_core.domain.config import MemoryConfig, merge_config_layers, parse_memory_config
from om_core.domain.envelope import NewEvent, StateSnapshot, StoredMessage, TaskRequest
from om_core.domain.events import (
    ChunksActivated,
    DomainEvent,
    ObservationBufferRequested,
    ReflectionActivated,
    ReflectionRequested,
    SyncObservationStarted,
    effect_event_id,
    from_recorded,
    to_new_event,
)
from om_core.domain.state import LogSegment, RecordState, evolve, fold, initial_state, window_message
from om_core.domain.timeutil import format_time
from om_core.domain.tokens import TokenCounter, make_tokenizer

TASK_OBSERVE_BUFFER = "om.observe_buffer"
TASK_OBSERVE_SYNC = "om.observe_sync"
TASK_REFLECT = "om.reflect"
TASK_INDEX_OBSERVATIONS = "om.index_observations"
QUEUE_SYNC = "om.sync"
QUEUE_BUFFER = "om.buffer"
QUEUE_MAINTENANCE = "om.maintenance"

MAX_CONFLICT_RETRIES = 50
_LOG_SEGMENTS = TypeAdapter(list[LogSegment])

T = TypeVar("T")


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Deps:
    """The adapters a use case runs against. The API, the workers and the CLI build one each."""

    store: EventStore
    models: ModelGateway
    dispatcher: WorkDispatcher
    profile: Mapping[str, Any] = field(default_factory=dict)
    clock: Callable[[], datetime] = utc_now
    max_message_bytes: int = 1_000_000
    sync_wait_seconds: float = 10.0
    states: StateCache = field(default_factory=StateCache)


class RecordNotFoundError(LookupError):
    def __init__(self, stream_id: str) -> None:
        super().__init__(f"no such thread or record: {stream_id}")
        self.stream_id = stream_id


def thread_stream_id(tenant: str, thread_id: str) -> str:
    return f"{tenant}/thread/{thread_id}"


def resource_stream_id(tenant: str, resource_id: str) -> str:
    return f"{tenant}/resource/{resource_id}"


class ResourceRequiredError(ValueError):
    """Resource scope keeps one record per resource: a thread with no resource id cannot be placed."""

    def __init__(self, thread_id: str) -> None:
        super().__init__(
            f"thread {thread_id!r} has no resource_id, which the resource scope needs: send resource_id with "
            "the messages or set it on the thread"
        )
        self.thread_id = thread_id


def profile_scope(profile: Mapping[str, Any]) -> str:
    return _parse_cached(json.dumps(dict(profile), sort_keys=True)).scope


def record_stream_for(deps: Deps, tenant: str, thread_id: str, resource_id: str | None = None) -> str:
    """The stream of the record a thread's messages belong to.

    Thread scope: the thread's own stream. Resource scope (a server-profile setting): the resource's
    stream, shared by every thread of the resource; the resource id comes from the request or from the
    thread's own stream, where ``PUT /threads`` recorded it.
    """
    thread_stream = thread_stream_id(tenant, thread_id)
    if profile_scope(deps.profile) != "resource":
        return thread_stream
    if resource_id is None:
        resource_id = load_state(deps.store, thread_stream, deps.states).resource_id
    if not resource_id:
        raise ResourceRequiredError(thread_id)
    return resource_stream_id(tenant, resource_id)


def tenant_of(stream_id: str) -> str:
    return stream_id.split("/", 1)[0]


def new_cycle_id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:16]}"


def request_event_id(stream_id: str, cycle_id: str) -> uuid.UUID:
    """The id of the event that started a cycle: a task finds it only in the lineage that requested it,
    which is how work for an erased (and perhaps re-created) stream knows to do nothing."""
    return effect_event_id(stream_id, cycle_id, "requested")


@lru_cache(maxsize=256)
def _parse_cached(canonical: str) -> MemoryConfig:
    return parse_memory_config(json.loads(canonical))


def record_config(profile: Mapping[str, Any], state: RecordState) -> MemoryConfig:
    """The server profile with the thread's own overrides on top."""
    merged = merge_config_layers(profile, state.config_overrides)
    return _parse_cached(json.dumps(merged, sort_keys=True))


@lru_cache(maxsize=16)
def token_counter(tokenizer_spec: str) -> TokenCounter:
    return TokenCounter(make_tokenizer(tokenizer_spec))


def counter_for(config: MemoryConfig) -> TokenCounter:
    return token_counter(config.tokenizer)


# Called with (stream id, why) each time a read folds a stream from its events instead of reading its row:
# metrics count them (in normal operation there are none, since every commit writes the row).
REPLAY_LISTENERS: list[Callable[[str, str], None]] = []


def load_state(store: EventStore, stream_id: str, cache: StateCache | None = None) -> RecordState:
    """The record's inline projection: one row, whatever the length of the stream. The caller owns it.

    Every commit writes it in the same transaction as its events, so it is never behind them, and the row
    and the window's messages are read from one snapshot. A stream without one (its projection was
    dropped, or written by an older shape of the state) is folded from its events. With a ``cache`` that
    holds the stream's current state, only the row's position is read.
    """
    known = cache.position(stream_id) if cache is not None else None
    stored = store.load_snapshot(stream_id, known_position=known)
    if stored is None:
        # an unknown stream is an empty state; a stream with events but no row is a dropped projection
        return _replayed(store, stream_id, "no record row")
    if stored.state is None and cache is not None:
        held = cache.take(stream_id, stored.position)
        if held is not None:
            return held
        # evicted between the two calls
        stored = store.load_snapshot(stream_id)
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


@dataclass
class Plan:
    """Events and outbox tasks decided for one commit, and the state they lead to.

    The plan takes ownership of the state it is given and evolves it in place as events are added: the
    caller must not keep using that state object as "before" (``base_version`` remembers where it was).
    """

    state: RecordState
    base_version: int = -1
    base_position: int = 0
    # keep a copy of the state as it was just before the first event this says yes to (for callers that
    # describe that event relative to what came before it, e.g. the data parts of an activation)
    capture_before: Callable[[DomainEvent], bool] | None = None
    prior: tuple[int, RecordState] | None = None
    events: list[DomainEvent] = field(default_factory=list)
    event_ids: list[uuid.UUID | None] = field(default_factory=list)
    tasks: list[TaskRequest] = field(default_factory=list)
    sync_cycle: str | None = None
    sync_task: str | None = None

    def __post_init__(self) -> None:
        if self.base_version < 0:
            self.base_version = self.state.version
            self.base_position = self.state.position

    def add(self, event: DomainEvent, *, event_id: uuid.UUID | None = None) -> None:
        if self.prior is None and self.capture_before is not None and self.capture_before(event):
            self.prior = (len(self.events), self.state.fork())
        self.events.append(event)
        self.event_ids.append(event_id)
        evolve(self.state, [event])


def plan_decisions(
    plan: Plan,
    config: MemoryConfig,
    now: datetime,
    *,
    mode: policy.Mode,
    caller_model: str | None = None,
) -> Plan:
    """Turn policy decisions into events until the policy is satisfied or needs a model synchronously."""
    stream_id = plan.state.stream_id
    counter = counter_for(config)
    stamp = format_time(now)
    while plan.sync_cycle is None:
        decision = policy.next_decision(plan.state, config, now, mode=mode, caller_model=caller_model)
        if decision is None:
            break
        state = plan.state
        if isinstance(decision, policy.ActivateChunks):
            chunks = state.chunks[: decision.count]
            plan.add(
                ChunksActivated(
                    cycle_ids=[c.cycle_id for c in chunks],
                    through_seq=chunks[-1].to_seq,
                    message_tokens=sum(c.message_tokens for c in chunks),
                    observation_tokens=sum(c.observation_tokens for c in chunks),
                    triggered_by=decision.triggered_by,
                    activated_at=stamp,
                    last_activity_at=decision.last_activity_at,
                    ttl_expired_ms=decision.ttl_expired_ms,
                    previous_model=decision.previous_model,
                    current_model=decision.current_model,
                )
            )
        elif isinstance(decision, policy.RequestObservationBuffer):
            cycle = new_cycle_id("buffer-obs")
            plan.add(
                ObservationBufferRequested(
                    cycle_id=cycle,
                    from_seq=decision.from_seq,
                    to_seq=decision.to_seq,
                    message_tokens=decision.message_tokens,
                    pending_tokens=decision.pending_tokens,
                    trigger=decision.trigger,
                    requested_at=stamp,
                ),
                event_id=request_event_id(stream_id, cycle),
            )
            plan.tasks.append(_task(stream_id, cycle, TASK_OBSERVE_BUFFER, QUEUE_BUFFER))
        elif isinstance(decision, policy.ObserveSynchronously):
            cycle = new_cycle_id("sync-obs")
            plan.add(
                SyncObservationStarted(
                    cycle_id=cycle,
                    from_seq=decision.from_seq,
                    to_seq=decision.to_seq,
                    message_tokens=decision.message_tokens,
                    trigger=decision.trigger,
                    started_at=stamp,
                ),
                event_id=request_event_id(stream_id, cycle),
            )
            plan.tasks.append(_task(stream_id, cycle, TASK_OBSERVE_SYNC, QUEUE_SYNC))
            plan.sync_cycle, plan.sync_task = cycle, TASK_OBSERVE_SYNC
        elif isinstance(decision, policy.RequestReflection):
            cycle = new_cycle_id("reflect-buf" if decision.mode == "buffered" else "reflect")
            plan.add(
                ReflectionRequested(
                    cycle_id=cycle,
                    mode=decision.mode,
                    generation=state.generation,
                    line_count=decision.line_count,
                    input_tokens=decision.input_tokens,
                    target_tokens=decision.target_tokens,
                    requested_at=stamp,
                ),
                event_id=request_event_id(stream_id, cycle),
            )
            queue = QUEUE_SYNC if decision.mode == "sync" else QUEUE_BUFFER
            plan.tasks.append(_task(stream_id, cycle, TASK_REFLECT, queue))
            if decision.mode == "sync":
                plan.sync_cycle, plan.sync_task = cycle, TASK_REFLECT
        else:
            buffered = state.buffered_reflection
            assert buffered is not None  # the policy only activates an existing buffered reflection
            carried = "\n".join(state.log_lines()[buffered.line_count :])
            total = buffered.tokens + (counter.count_text(carried) if carried.strip() else 0)
            plan.add(
                ReflectionActivated(
                    cycle_id=buffered.cycle_id,
                    new_generation=state.generation + 1,
                    observation_tokens_before=state.observation_tokens,
                    observation_tokens=total,
                    triggered_by=decision.triggered_by,
                    activated_at=stamp,
                )
            )
    return plan


def _task(stream_id: str, cycle_id: str, task_name: str, queue: str) -> TaskRequest:
    return TaskRequest(
        key=f"{stream_id}:{cycle_id}",
        task_name=task_name,
        queue=queue,
        payload={"stream_id": stream_id, "cycle_id": cycle_id},
    )


def commit(deps: Deps, plan: Plan, *, metadata: Mapping[str, Any] | None = None) -> int:
    """Append the plan's events with compare-and-set on the version it started from; returns the new one.

    Raises ConcurrencyError when another writer got there first: callers re-load and re-plan.
    """
    base_version = plan.base_version
    if not plan.events:
        return base_version
    stream_id = plan.state.stream_id
    meta = {"tenant": tenant_of(stream_id), **(metadata or {})}
    new_events: list[NewEvent] = [
        to_new_event(event, metadata=meta, event_id=event_id)
        for event, event_id in zip(plan.events, plan.event_ids, strict=True)
    ]
    plan.state.version = base_version + len(new_events)
    result = deps.store.append(
        stream_id,
        new_events,
        base_version,
        expected_position=plan.base_position or None,
        snapshot=snapshot_of(plan.state, tenant_of(stream_id)),
        tasks=plan.tasks,
    )
    plan.state.position = result.global_positions[-1]
    plan.state.mark_log_stored()
    deps.states.keep(stream_id, result.global_positions[-1], plan.state.fork())
    if plan.tasks:
        deps.dispatcher.dispatch(plan.tasks)
    return result.last_version


def retry_on_conflict(operation: Callable[[], T]) -> T:
    """Run ``operation`` again after a lost compare-and-set; it must re-read what it depends on."""
    for _ in range(MAX_CONFLICT_RETRIES):
        try:
            return operation()
        except ConcurrencyError:
            continue
    return operation()
