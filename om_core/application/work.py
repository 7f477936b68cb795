"""Use cases for model work: observe (buffered or synchronous) and reflect.

Each runs one requested cycle of one record, identified by (stream, cycle id). It re-reads the stream, runs
the model, and appends its outcome with compare-and-set after re-validating that the cycle is still the one
in flight. The outcome event's id is derived from (stream, cycle), so a second delivery of the same task can
never apply a second outcome: the store rejects it as a duplicate.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from om_core.application.configuration import counter_for
from om_core.application.decisions import plan_decisions, request_event_id
from om_core.application.deps import Deps
from om_core.application.leases import held_lease
from om_core.application.observer import ObserverFailedError, observe_messages
from om_core.application.ports import DuplicateEventError, ModelConfigurationError, ModelError
from om_core.application.profiles import config_of
from om_core.application.reflector import ReflectorFailedError, reflect_observations
from om_core.application.repository import load_state
from om_core.application.task_requests import (
    TASK_INDEX_OBSERVATIONS,
    TASK_OBSERVE_BUFFER,
    TASK_OBSERVE_SYNC,
    TASK_REFLECT,
    cycle_key,
    task_key,
)
from om_core.application.unit_of_work import Plan, commit, retry_on_conflict
from om_core.application.vector_index import index_observations, index_task, vector_index_enabled
from om_core.domain.events import (
    DomainEvent,
    ObservationBufferCompleted,
    ObservationBufferFailed,
    ObservationBufferStale,
    ObservationBufferStarted,
    ReflectionBuffered,
    ReflectionCompleted,
    ReflectionFailed,
    ReflectionStale,
    SyncObservationCompleted,
    SyncObservationFailed,
    SyncObservationStale,
    ThreadTitleChanged,
    Usage,
    effect_event_id,
)
from om_core.domain.observer_output import thread_title_accepted
from om_core.domain.state import BufferInFlight, RecordState, ReflectionInFlight, SyncInFlight
from om_core.domain.timeutil import format_time

log = logging.getLogger(__name__)


class WorkOutcome(enum.StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    STALE = "stale"
    DUPLICATE = "duplicate"
    # the record was erased (and perhaps re-created: the cycle is not of its lineage): nothing is written
    ERASED = "erased"
    # another live process holds the cycle's lease and runs it: this delivery leaves the cycle to it
    BUSY = "busy"
    # the cycle's worker was lost (its lease lapsed) and the cycle was taken back: its work is requested
    # again (what a reader waiting on the cycle finds)
    LOST = "lost"


class UnknownTaskError(ValueError):
    pass


def run_task(deps: Deps, task_name: str, stream_id: str, cycle_id: str) -> WorkOutcome:
    runners: dict[str, Callable[[Deps, str, str], WorkOutcome]] = {
        TASK_OBSERVE_BUFFER: run_buffer_observation,
        TASK_OBSERVE_SYNC: run_sync_observation,
        TASK_REFLECT: run_reflection,
        TASK_INDEX_OBSERVATIONS: run_indexing,
    }
    runner = runners.get(task_name)
    if runner is None:
        raise UnknownTaskError(f"unknown task {task_name!r}")
    outcome = runner(deps, stream_id, cycle_id)
    if outcome is not WorkOutcome.BUSY:
        # the run ended: whatever the broker still holds of the task, it needs no publishing again
        deps.outbox.mark_tasks_completed([task_key(stream_id, cycle_id, task_name)])
    return outcome


def _record_outcome(
    deps: Deps,
    stream_id: str,
    cycle_id: str,
    build: Callable[[RecordState], list[DomainEvent] | None],
    *,
    stale: Callable[[RecordState], DomainEvent],
) -> WorkOutcome:
    """Append the outcome of a cycle, or a stale record of it when the cycle is no longer in flight.

    ``build`` returns the outcome events for a state in which the cycle is still valid, or None when it is
    not. The first event carries the cycle's deterministic outcome id.
    """
    outcome_id = effect_event_id(stream_id, cycle_id, "outcome")

    def attempt() -> WorkOutcome:
        state = load_state(deps.records, deps.store, stream_id, deps.states)
        if not _of_this_lineage(deps, state, cycle_id):
            return _erased(stream_id, cycle_id)
        config = config_of(deps, state)
        events = build(state)
        plan = Plan(state)
        result = WorkOutcome.COMPLETED
        if events is None:
            events = [stale(state)]
            result = WorkOutcome.STALE
        for index, event in enumerate(events):
            plan.add(event, event_id=outcome_id if index == 0 else None)
        if isinstance(events[0], ObservationBufferFailed | SyncObservationFailed | ReflectionFailed):
            result = WorkOutcome.FAILED
        first = events[0]
        if (
            isinstance(first, ObservationBufferCompleted | SyncObservationCompleted)
            and first.observations.strip()
            and vector_index_enabled(config)
        ):
            plan.tasks.append(index_task(stream_id, cycle_id))
        plan_decisions(plan, config, deps.clock(), mode="work")
        try:
            commit(deps, plan)
        except DuplicateEventError:
            if result is WorkOutcome.STALE and getattr(events[0], "usage", None) is not None:
                return _record_late(deps, stream_id, cycle_id, events[0])
            return WorkOutcome.DUPLICATE
        return result

    return retry_on_conflict(attempt)


def _record_late(deps: Deps, stream_id: str, cycle_id: str, stale: DomainEvent) -> WorkOutcome:
    """Record the result of a run whose cycle was already closed by somebody else (its lease lapsed while
    the model ran, so the cycle was taken back): stale, with what its calls cost, under an id of its own,
    since the cycle's outcome id is taken. A second such result is a duplicate."""
    late_id = effect_event_id(stream_id, cycle_id, "late")

    def attempt() -> WorkOutcome:
        state = load_state(deps.records, deps.store, stream_id, deps.states)
        if state.version == 0:
            return _erased(stream_id, cycle_id)
        plan = Plan(state)
        plan.add(stale, event_id=late_id)
        try:
            commit(deps, plan)
        except DuplicateEventError:
            return WorkOutcome.DUPLICATE
        return WorkOutcome.STALE

    return retry_on_conflict(attempt)


def _of_this_lineage(deps: Deps, state: RecordState, cycle_id: str) -> bool:
    """Whether the cycle was requested in the stream as it is now, not in one erased since.

    A cycle in flight is, by definition. Any other needs a look-up of its request event (one index probe,
    and only for stale results): an erasure removes it, and a stream re-created under the same id never
    has it, since cycle ids are never reused.
    """
    if state.version == 0:
        return False
    if state.in_flight(cycle_id) is not None:
        return True
    requested = deps.store.find_event(request_event_id(state.stream_id, cycle_id))
    return requested is not None and requested.stream_id == state.stream_id


def _erased(stream_id: str, cycle_id: str) -> WorkOutcome:
    log.info("%s %s: the record was erased meanwhile; nothing to do", stream_id, cycle_id)
    return WorkOutcome.ERASED


def run_indexing(deps: Deps, stream_id: str, cycle_id: str) -> WorkOutcome:
    """Index a cycle's observation groups. A failed embedding only costs recall some groups: it is logged
    and counted, and indexing the cycle again (a redelivery) replaces whatever was stored."""
    try:
        index_observations(deps, stream_id, cycle_id)
    except (ModelError, ModelConfigurationError) as error:
        log.warning("indexing %s %s failed: %s", stream_id, cycle_id, error)
        return WorkOutcome.FAILED
    return WorkOutcome.COMPLETED


# --- observation ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ObservationKind:
    """What differs between a background (buffer) and a synchronous observation cycle."""

    buffered: bool
    flight: type[BufferInFlight] | type[SyncInFlight]
    completed: type[ObservationBufferCompleted] | type[SyncObservationCompleted]
    failed: type[ObservationBufferFailed] | type[SyncObservationFailed]
    stale: type[ObservationBufferStale] | type[SyncObservationStale]
    stale_reason: str


_BUFFER = _ObservationKind(
    buffered=True,
    flight=BufferInFlight,
    completed=ObservationBufferCompleted,
    failed=ObservationBufferFailed,
    stale=ObservationBufferStale,
    stale_reason="messages were observed meanwhile",
)
_SYNC = _ObservationKind(
    buffered=False,
    flight=SyncInFlight,
    completed=SyncObservationCompleted,
    failed=SyncObservationFailed,
    stale=SyncObservationStale,
    stale_reason="the cycle is no longer in flight",
)


def run_buffer_observation(deps: Deps, stream_id: str, cycle_id: str) -> WorkOutcome:
    return _run_observation(deps, stream_id, cycle_id, _BUFFER)


def run_sync_observation(deps: Deps, stream_id: str, cycle_id: str) -> WorkOutcome:
    return _run_observation(deps, stream_id, cycle_id, _SYNC)


def _run_observation(deps: Deps, stream_id: str, cycle_id: str, kind: _ObservationKind) -> WorkOutcome:
    state = load_state(deps.records, deps.store, stream_id, deps.states)
    if state.version == 0:
        return _erased(stream_id, cycle_id)
    flight = state.in_flight(cycle_id, kind.flight)
    if flight is None:
        # already done (a redelivery: the stale record collides with the stored outcome) or superseded
        return _record_outcome(deps, stream_id, cycle_id, lambda s: None, stale=_stale(deps, kind, cycle_id))
    with held_lease(deps, cycle_key(stream_id, cycle_id), stream_id) as holder:
        if holder is not None:
            log.info("%s %s: %s runs it", stream_id, cycle_id, holder)
            return WorkOutcome.BUSY
        return _observe(deps, state, flight, kind)


def _observe(
    deps: Deps, state: RecordState, flight: BufferInFlight | SyncInFlight, kind: _ObservationKind
) -> WorkOutcome:
    """Run the Observer on the cycle's messages and record what came of it."""
    stream_id, cycle_id = state.stream_id, flight.cycle_id

    def valid(s: RecordState) -> bool:
        return s.in_flight(cycle_id, kind.flight) is not None

    config = config_of(deps, state)
    if kind.buffered:
        _mark_started(deps, stream_id, cycle_id)
    messages = [m for m in state.window if flight.from_seq <= m.seq <= flight.to_seq]
    started = time.monotonic()
    try:
        result = observe_messages(
            deps.models, state, config, messages, buffered=kind.buffered, cycle_id=cycle_id
        )
    except ObserverFailedError as exc:
        failed = kind.failed(
            cycle_id=cycle_id,
            error=str(exc),
            attempts=exc.attempts,
            usage=exc.usage,
            failed_at=format_time(deps.clock()),
        )
        return _record_outcome(
            deps,
            stream_id,
            cycle_id,
            lambda s: [failed] if valid(s) else None,
            stale=_stale(deps, kind, cycle_id, exc.usage),
        )
    completed = kind.completed(
        cycle_id=cycle_id,
        from_seq=flight.from_seq,
        to_seq=flight.to_seq,
        message_ids=[m.message_id for m in messages],
        message_tokens=sum(m.tokens for m in messages),
        observations=result.observations,
        observation_tokens=result.observation_tokens,
        last_observed_at=result.last_observed_at,
        current_task=result.current_task,
        suggested_response=result.suggested_response,
        thread_title=result.thread_title,
        extracted=result.extracted,
        extraction_failures=result.extraction_failures,
        usage=result.usage,
        completed_at=format_time(deps.clock()),
        duration_ms=(time.monotonic() - started) * 1000,
        working_memory=result.working_memory,
    )
    return _record_outcome(
        deps,
        stream_id,
        cycle_id,
        lambda s: [completed, *_title_events(s, result.thread_title, cycle_id, deps)] if valid(s) else None,
        stale=_stale(deps, kind, cycle_id, result.usage),
    )


def _stale(
    deps: Deps, kind: _ObservationKind, cycle_id: str, usage: Usage | None = None
) -> Callable[[RecordState], DomainEvent]:
    # what a discarded answer cost still counts: its calls were made and billed
    return lambda s: kind.stale(
        cycle_id=cycle_id, reason=kind.stale_reason, usage=usage, at=format_time(deps.clock())
    )


def _mark_started(deps: Deps, stream_id: str, cycle_id: str) -> None:
    started_id = effect_event_id(stream_id, cycle_id, "started")

    def attempt() -> None:
        state = load_state(deps.records, deps.store, stream_id, deps.states)
        flight = state.in_flight(cycle_id, BufferInFlight)
        # an erased stream has no flight: nothing is written for it
        if flight is None or flight.started:
            return
        plan = Plan(state)
        plan.add(
            ObservationBufferStarted(cycle_id=cycle_id, attempt=1, started_at=format_time(deps.clock())),
            event_id=started_id,
        )
        try:
            commit(deps, plan)
        except DuplicateEventError:
            return

    retry_on_conflict(attempt)


def _title_events(state: RecordState, title: str | None, cycle_id: str, deps: Deps) -> list[DomainEvent]:
    if title is None or state.thread_id is None:
        return []
    pinned = bool(state.thread_metadata.get("titlePinned"))
    if not thread_title_accepted(title, state.title, pinned):
        return []
    return [
        ThreadTitleChanged(
            thread_id=state.thread_id,
            old_title=state.title,
            new_title=title.strip(),
            cycle_id=cycle_id,
            at=format_time(deps.clock()),
        )
    ]


# --- reflection -------------------------------------------------------------------------------------------


def run_reflection(deps: Deps, stream_id: str, cycle_id: str) -> WorkOutcome:
    state = load_state(deps.records, deps.store, stream_id, deps.states)
    if state.version == 0:
        return _erased(stream_id, cycle_id)
    flight = _reflection_in_flight(state, cycle_id)
    if flight is None:
        return _record_outcome(
            deps, stream_id, cycle_id, lambda s: None, stale=_reflection_stale(cycle_id, deps)
        )
    with held_lease(deps, cycle_key(stream_id, cycle_id), stream_id) as holder:
        if holder is not None:
            log.info("%s %s: %s runs it", stream_id, cycle_id, holder)
            return WorkOutcome.BUSY
        return _reflect(deps, state, flight)


def _reflect(deps: Deps, state: RecordState, flight: ReflectionInFlight) -> WorkOutcome:
    """Run the Reflector on the cycle's slice of the log and record what came of it."""
    stream_id, cycle_id = state.stream_id, flight.cycle_id
    config = config_of(deps, state)
    counter = counter_for(config)
    source = "\n".join(state.log_lines()[: flight.line_count])
    source_tokens = counter.count_text(source)
    started = time.monotonic()
    stamp = format_time(deps.clock())
    try:
        result = reflect_observations(
            deps.models,
            config,
            source,
            target_tokens=flight.target_tokens,
            buffered=flight.mode == "buffered",
            prior_values=state.extracted,
        )
    except ReflectorFailedError as exc:
        failed = ReflectionFailed(
            cycle_id=cycle_id,
            mode=flight.mode,
            error=str(exc),
            observation_tokens=state.observation_tokens,
            levels_tried=exc.levels_tried,
            usage=exc.usage,
            failed_at=stamp,
        )
        return _record_outcome(
            deps,
            stream_id,
            cycle_id,
            lambda s: [failed] if _reflection_in_flight(s, cycle_id) is not None else None,
            stale=_reflection_stale(cycle_id, deps, exc.usage),
        )
    duration = (time.monotonic() - started) * 1000

    def outcome(s: RecordState) -> list[DomainEvent] | None:
        if _reflection_in_flight(s, cycle_id) is None:
            return None
        if flight.mode == "buffered":
            return [
                ReflectionBuffered(
                    cycle_id=cycle_id,
                    generation=flight.generation,
                    line_count=flight.line_count,
                    # measured, not the request's per-line estimate: activation must really shrink the log
                    input_tokens=source_tokens,
                    text=result.text,
                    tokens=result.tokens,
                    levels_tried=result.levels_tried,
                    extracted=result.extracted,
                    extraction_failures=result.extraction_failures,
                    usage=result.usage,
                    completed_at=format_time(deps.clock()),
                    duration_ms=duration,
                )
            ]
        # lines appended after the slice while the Reflector ran are kept in the new generation
        carried = "\n".join(s.log_lines()[flight.line_count :])
        total = result.tokens + (counter.count_text(carried) if carried.strip() else 0)
        return [
            ReflectionCompleted(
                cycle_id=cycle_id,
                new_generation=s.generation + 1,
                line_count=flight.line_count,
                input_tokens=flight.input_tokens,
                text=result.text,
                tokens=result.tokens,
                observation_tokens=total,
                over_target=not result.under_target,
                levels_tried=result.levels_tried,
                extracted=result.extracted,
                extraction_failures=result.extraction_failures,
                suggested_response=result.suggested_response,
                usage=result.usage,
                completed_at=format_time(deps.clock()),
                duration_ms=duration,
            )
        ]

    return _record_outcome(
        deps, stream_id, cycle_id, outcome, stale=_reflection_stale(cycle_id, deps, result.usage)
    )


def _reflection_in_flight(state: RecordState, cycle_id: str) -> ReflectionInFlight | None:
    """The reflection in flight, if it is still of the current generation: one of an earlier generation
    was computed on a log that is gone."""
    flight = state.in_flight(cycle_id, ReflectionInFlight)
    return flight if flight is not None and flight.generation == state.generation else None


def _reflection_stale(
    cycle_id: str, deps: Deps, usage: Usage | None = None
) -> Callable[[RecordState], DomainEvent]:
    return lambda s: ReflectionStale(
        cycle_id=cycle_id,
        reason="the log changed generation meanwhile",
        usage=usage,
        at=format_time(deps.clock()),
    )
