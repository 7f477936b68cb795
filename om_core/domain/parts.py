"""Domain events as Mastra's streamed ``data-om-*`` parts (reference §8), with Mastra's camelCase fields.

Pure: a part depends only on the event, the record state just before and just after it, and the record's
configuration. Front ends written for Mastra (AI SDK UI message streams) read these unchanged. A part is
framed as the AI SDK frames a data part: ``{"type": "data-om-…", "id": …, "data": {…}}``; the AI SDK
reconciles parts with the same type and id, so ids are cycle ids (one status id per record: the newest
status replaces the previous one in a client's message).

Mapping (ours → Mastra):
- ObservationBufferRequested → data-om-buffering-start (observation); Completed → buffering-end;
  Failed → buffering-failed.
- ReflectionRequested buffered → buffering-start (reflection); ReflectionBuffered → buffering-end;
  ReflectionFailed buffered → buffering-failed.
- SyncObservationStarted → data-om-observation-start (observation); Completed → observation-end;
  Failed → observation-failed. ReflectionRequested sync → observation-start (reflection);
  ReflectionCompleted → observation-end; ReflectionFailed sync → observation-failed.
- ChunksActivated → one data-om-activation per chunk (cycleId = the chunk's buffering cycle);
  ReflectionActivated → one data-om-activation (operationType reflection).
- ThreadTitleChanged → data-om-thread-update.
Buffer-run starts, extraction and bookkeeping events have no Mastra counterpart: no part.

Every ``-end`` and ``-failed`` part carries the cycle's ``usage``, as Mastra's end hooks do: the model, the
tokens in and out, the cost, the time spent in model calls and the number of calls (retries included), for
a failure too (what its calls cost before it failed). A discarded ``-end`` has the usage of the cycle's own
stale result when that closed it, else ``usage: null`` (another cycle took over before it answered).

Every start is closed exactly once. A cycle is open while it holds its slot in the state (buffer, sync,
reflection in flight); the event that takes it out of its slot closes it. Its own result does so with the
parts above; otherwise (a synchronous observation overtaking a buffer run, a synchronous reflection
overtaking a buffered one, a stale result of a cycle still in its slot) the cycle is closed, just before
that event's own parts, by the ``-end`` of its kind marked ``discarded: true`` with a ``reason``, nothing
observed or buffered. A stale result of a cycle closed earlier adds nothing. ``cycle_closure`` checks this
for a whole stream; ``erased_parts`` closes what an erasure left in flight (no event records that).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from om_core.domain.config import MemoryConfig, parse_memory_config
from om_core.domain.context import build_status
from om_core.domain.events import (
    ChunksActivated,
    DomainEvent,
    MessageAppended,
    ObservationBufferCompleted,
    ObservationBufferFailed,
    ObservationBufferRequested,
    ObservationBufferStale,
    ReflectionActivated,
    ReflectionBuffered,
    ReflectionCompleted,
    ReflectionFailed,
    ReflectionRequested,
    ReflectionStale,
    StaleOutcome,
    SyncObservationCompleted,
    SyncObservationFailed,
    SyncObservationStale,
    SyncObservationStarted,
    TemporalMarkerInserted,
    ThreadTitleChanged,
    Usage,
)
from om_core.domain.policy import resolve_limits
from om_core.domain.state import RecordState, fold, initial_state

Part = dict[str, Any]

STATUS = "data-om-status"
OBSERVATION_START = "data-om-observation-start"
OBSERVATION_END = "data-om-observation-end"
OBSERVATION_FAILED = "data-om-observation-failed"
BUFFERING_START = "data-om-buffering-start"
BUFFERING_END = "data-om-buffering-end"
BUFFERING_FAILED = "data-om-buffering-failed"
ACTIVATION = "data-om-activation"
THREAD_UPDATE = "data-om-thread-update"

# the reason a discarded part gives when the record itself was erased
ERASED = "the thread was erased"

PART_TYPES = (
    STATUS,
    OBSERVATION_START,
    OBSERVATION_END,
    OBSERVATION_FAILED,
    BUFFERING_START,
    BUFFERING_END,
    BUFFERING_FAILED,
    ACTIVATION,
    THREAD_UPDATE,
)

# Events that can take a cycle out of flight without being its own result: a cycle that took over its
# slot, or a stale result. Their parts close the cycle they displaced, which only the prior state names.
_DISPLACES = (
    SyncObservationStarted,
    ReflectionRequested,
    ObservationBufferStale,
    SyncObservationStale,
    ReflectionStale,
)
# Events whose parts read the state as it was before them (what was in flight, what was buffered).
_NEEDS_PRIOR = (
    ChunksActivated,
    ReflectionActivated,
    ObservationBufferFailed,
    SyncObservationFailed,
    ReflectionFailed,
    ObservationBufferCompleted,
    ReflectionBuffered,
    *_DISPLACES,
)
# Events with a lifecycle part of their own (start, end, failure, activation, thread update): what a
# webhook can be told about
LIFECYCLE_EVENTS = (
    ObservationBufferRequested,
    ObservationBufferCompleted,
    ObservationBufferFailed,
    ObservationBufferStale,
    SyncObservationStarted,
    SyncObservationCompleted,
    SyncObservationFailed,
    SyncObservationStale,
    ReflectionRequested,
    ReflectionBuffered,
    ReflectionCompleted,
    ReflectionFailed,
    ReflectionStale,
    ChunksActivated,
    ReflectionActivated,
    ThreadTitleChanged,
)
# Events after which the status object can change: a status part follows each of them on the live stream.
_CHANGES_STATUS = (
    MessageAppended,
    TemporalMarkerInserted,
    ObservationBufferRequested,
    ObservationBufferCompleted,
    ObservationBufferFailed,
    ObservationBufferStale,
    ChunksActivated,
    SyncObservationStarted,
    SyncObservationCompleted,
    ReflectionRequested,
    ReflectionBuffered,
    ReflectionActivated,
    ReflectionCompleted,
    ReflectionFailed,
    ReflectionStale,
)


def frame(part_type: str, part_id: str, data: dict[str, Any]) -> Part:
    return {"type": part_type, "id": part_id, "data": data}


def status_part(
    state: RecordState, config: MemoryConfig, *, step_number: int = 0, reader_thread: str | None = None
) -> Part:
    """The record's status; ``reader_thread``: the thread it is shown to (in resource scope, its threadId)."""
    status = build_status(state, config, step_number=step_number, reader_thread=reader_thread)
    return frame(STATUS, f"om-status:{state.stream_id}", status)


def needs_prior_state(event: DomainEvent) -> bool:
    return isinstance(event, _NEEDS_PRIOR)


def changes_status(event: DomainEvent) -> bool:
    return isinstance(event, _CHANGES_STATUS)


def event_parts(
    event: DomainEvent, before: RecordState | None, after: RecordState, config: MemoryConfig
) -> list[Part]:
    """The lifecycle parts one event stands for (status parts excluded), in Mastra's emission order.

    ``before`` may be None only for events where ``needs_prior_state`` is False. A cycle the event took
    out of flight without it being the cycle's own result is closed first, as a discarded ``-end``.
    """
    if needs_prior_state(event) and before is None:
        raise ValueError(f"{event.event_type} parts need the state before the event")
    ids = {"recordId": after.stream_id, "threadId": after.thread_id}
    own = _own_parts(event, before, after, config, ids)
    if before is None or not isinstance(event, _DISPLACES):
        return own
    at, reason = _displacement(event)
    # a stale result closes its own cycle, and records what its calls cost
    spent = {event.cycle_id: event.usage} if isinstance(event, StaleOutcome) and event.usage else {}
    return [*_discarded(before, after, at, reason, ids, spent), *own]


def erased_parts(state: RecordState, at: str) -> list[Part]:
    """The closing parts of the cycles in flight in ``state`` when its record was erased at ``at``: no
    event records an erasure, so whoever was following the record (the live stream) closes them."""
    ids = {"recordId": state.stream_id, "threadId": state.thread_id}
    return _discarded(state, initial_state(state.stream_id), at, ERASED, ids)


def _own_parts(
    event: DomainEvent,
    before: RecordState | None,
    after: RecordState,
    config: MemoryConfig,
    ids: dict[str, Any],
) -> list[Part]:
    if isinstance(event, ObservationBufferRequested):
        start = _Start("observation", event.requested_at, "tokensToBuffer", event.message_tokens)
        return [_start_part(BUFFERING_START, event.cycle_id, start, ids, after, config)]
    if isinstance(event, ObservationBufferCompleted):
        assert before is not None
        return [
            _end_part(
                BUFFERING_END,
                event.cycle_id,
                "observation",
                event.completed_at,
                event.duration_ms,
                {
                    "tokensBuffered": event.message_tokens,
                    "bufferedTokens": after.chunk_observation_tokens,
                    "observations": event.observations,
                    "extractedValues": dict(event.extracted),
                    "extractionFailures": dict(event.extraction_failures),
                },
                ids,
                usage=event.usage,
            )
        ]
    if isinstance(event, ObservationBufferFailed):
        assert before is not None
        flight = before.buffer_in_flight
        return [
            _failed(
                BUFFERING_FAILED,
                event.cycle_id,
                "observation",
                event.failed_at,
                _since(flight.requested_at if flight else None, event.failed_at),
                flight.message_tokens if flight else 0,
                event.error,
                ids,
                event.usage,
            )
        ]
    if isinstance(event, SyncObservationStarted):
        start = _Start("observation", event.started_at, "tokensToObserve", event.message_tokens)
        return [_start_part(OBSERVATION_START, event.cycle_id, start, ids, after, config)]
    if isinstance(event, SyncObservationCompleted):
        return [
            _end_part(
                OBSERVATION_END,
                event.cycle_id,
                "observation",
                event.completed_at,
                event.duration_ms,
                {
                    "tokensObserved": event.message_tokens,
                    "observationTokens": event.observation_tokens,
                    "observations": event.observations,
                    "currentTask": event.current_task,
                    "suggestedResponse": event.suggested_response,
                    "extractedValues": dict(event.extracted),
                    "extractionFailures": dict(event.extraction_failures),
                },
                ids,
                usage=event.usage,
            )
        ]
    if isinstance(event, SyncObservationFailed):
        assert before is not None
        sync = before.sync_in_flight
        return [
            _failed(
                OBSERVATION_FAILED,
                event.cycle_id,
                "observation",
                event.failed_at,
                _since(sync.started_at if sync else None, event.failed_at),
                sync.message_tokens if sync else 0,
                event.error,
                ids,
                event.usage,
            )
        ]
    if isinstance(event, ReflectionRequested):
        buffered = event.mode == "buffered"
        key = "tokensToBuffer" if buffered else "tokensToObserve"
        start = _Start("reflection", event.requested_at, key, event.input_tokens)
        part_type = BUFFERING_START if buffered else OBSERVATION_START
        return [_start_part(part_type, event.cycle_id, start, ids, after, config)]
    if isinstance(event, ReflectionBuffered):
        return [
            _end_part(
                BUFFERING_END,
                event.cycle_id,
                "reflection",
                event.completed_at,
                event.duration_ms,
                {
                    "tokensBuffered": event.input_tokens,
                    "bufferedTokens": event.tokens,
                    "observations": event.text,
                    "extractedValues": dict(event.extracted),
                    "extractionFailures": dict(event.extraction_failures),
                },
                ids,
                usage=event.usage,
            )
        ]
    if isinstance(event, ReflectionCompleted):
        return [
            _end_part(
                OBSERVATION_END,
                event.cycle_id,
                "reflection",
                event.completed_at,
                event.duration_ms,
                {
                    "tokensObserved": event.input_tokens,
                    "observationTokens": event.tokens,
                    "observations": event.text,
                    "currentTask": after.current_task,
                    "suggestedResponse": after.suggested_response,
                    "extractedValues": dict(event.extracted),
                    "extractionFailures": dict(event.extraction_failures),
                },
                ids,
                usage=event.usage,
            )
        ]
    if isinstance(event, ReflectionFailed):
        assert before is not None
        reflecting = before.reflection_in_flight
        return [
            _failed(
                BUFFERING_FAILED if event.mode == "buffered" else OBSERVATION_FAILED,
                event.cycle_id,
                "reflection",
                event.failed_at,
                _since(reflecting.requested_at if reflecting else None, event.failed_at),
                reflecting.input_tokens if reflecting else event.observation_tokens,
                event.error,
                ids,
                event.usage,
            )
        ]
    if isinstance(event, ChunksActivated):
        assert before is not None
        return _chunk_activations(event, before, after, config, ids)
    if isinstance(event, ReflectionActivated):
        assert before is not None
        reflection = before.buffered_reflection
        return [
            frame(
                ACTIVATION,
                event.cycle_id,
                {
                    "cycleId": event.cycle_id,
                    "operationType": "reflection",
                    "activatedAt": event.activated_at,
                    "chunksActivated": 1,
                    "tokensActivated": event.observation_tokens_before,
                    "observationTokens": event.observation_tokens,
                    "messagesActivated": 0,
                    "generationCount": event.new_generation,
                    "observations": reflection.text if reflection else None,
                    "triggeredBy": _mastra_trigger(event.triggered_by),
                    "lastActivityAt": None,
                    "ttlExpiredMs": None,
                    "previousModel": None,
                    "currentModel": None,
                    **ids,
                    "config": _config(config, after),
                },
            )
        ]
    if isinstance(event, ThreadTitleChanged):
        return [
            frame(
                THREAD_UPDATE,
                event.cycle_id,
                {
                    "cycleId": event.cycle_id,
                    "threadId": event.thread_id,
                    "oldTitle": event.old_title,
                    "newTitle": event.new_title,
                    "timestamp": event.at,
                },
            )
        ]
    return []


def parts_for_events(
    before: RecordState,
    events: Sequence[DomainEvent],
    config: MemoryConfig,
    *,
    status_after_each: bool = True,
) -> list[tuple[int, list[Part]]]:
    """Fold ``events`` onto ``before`` and return, per event index, its lifecycle parts followed (when it
    can change them and ``status_after_each``) by the status as of just after it."""
    out: list[tuple[int, list[Part]]] = []
    state = before
    for index, event in enumerate(events):
        after = fold(state, [event])
        parts = event_parts(event, state, after, config)
        if status_after_each and changes_status(event):
            parts.append(status_part(after, config))
        out.append((index, parts))
        state = after
    return out


@dataclass(frozen=True, slots=True)
class CycleClosure:
    """How the start parts of a stream were closed. Each list holds cycle ids, in first-seen order."""

    # started and not closed yet: the cycles in flight, and nothing else once the stream has settled
    unclosed: list[str]
    # more than one closing part
    closed_twice: list[str]
    # more than one start part
    started_twice: list[str]
    # a closing part with no start part before it
    closed_unstarted: list[str]

    @property
    def ok(self) -> bool:
        """Every start closed exactly once (true only of a stream with no cycle in flight)."""
        return not (self.unclosed or self.closed_twice or self.started_twice or self.closed_unstarted)


_STARTS = (BUFFERING_START, OBSERVATION_START)
_CLOSES = (BUFFERING_END, BUFFERING_FAILED, OBSERVATION_END, OBSERVATION_FAILED)


def closure_of_parts(parts: Iterable[Part]) -> CycleClosure:
    """Pair the start parts in ``parts`` (in emission order) with their closing parts by cycle id."""
    starts: Counter[str] = Counter()
    closes: Counter[str] = Counter()
    unstarted: list[str] = []
    for part in parts:
        if part["type"] not in _STARTS and part["type"] not in _CLOSES:
            continue
        cycle_id = str(part["data"].get("cycleId", part["id"]))
        if part["type"] in _STARTS:
            starts[cycle_id] += 1
            continue
        if not starts[cycle_id] and cycle_id not in unstarted:
            unstarted.append(cycle_id)
        closes[cycle_id] += 1
    return CycleClosure(
        unclosed=[c for c in starts if starts[c] and not closes[c]],
        closed_twice=[c for c in closes if closes[c] > 1],
        started_twice=[c for c in starts if starts[c] > 1],
        closed_unstarted=unstarted,
    )


def cycle_closure(events: Iterable[DomainEvent], config: MemoryConfig | None = None) -> CycleClosure:
    """The closure of a whole stream's start parts, from its domain events (first event first).

    For checkers: folds the events from an empty record through ``parts_for_events``, as the live stream
    does. ``config`` only shapes the parts' ``config`` fields, never which parts there are.
    """
    parts = parts_for_events(
        initial_state("cycle-closure"),
        list(events),
        config if config is not None else parse_memory_config({}),
        status_after_each=False,
    )
    return closure_of_parts(p for _, batch in parts for p in batch)


# --- helpers ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Start:
    operation: str
    started_at: str
    tokens_key: str
    tokens: int


def _start_part(
    part_type: str,
    cycle_id: str,
    start: _Start,
    ids: dict[str, Any],
    after: RecordState,
    config: MemoryConfig,
) -> Part:
    """A ``*-start`` part: what is about to be observed or reflected, and the configuration doing it."""
    return frame(
        part_type,
        cycle_id,
        {
            "cycleId": cycle_id,
            "operationType": start.operation,
            "startedAt": start.started_at,
            start.tokens_key: start.tokens,
            **ids,
            "threadIds": _thread_ids(after),
            "config": _config(config, after),
        },
    )


def _end_part(
    part_type: str,
    cycle_id: str,
    operation: str,
    completed_at: str,
    duration_ms: float,
    outcome: dict[str, Any],
    ids: dict[str, Any],
    *,
    usage: Usage | None,
) -> Part:
    """A ``*-end`` part: the cycle's identity and timing around what it produced, and what it cost."""
    return frame(
        part_type,
        cycle_id,
        {
            "cycleId": cycle_id,
            "operationType": operation,
            "completedAt": completed_at,
            "durationMs": duration_ms,
            **outcome,
            "usage": usage_data(usage),
            **ids,
        },
    )


def usage_data(usage: Usage | None) -> dict[str, Any] | None:
    """A cycle's usage as the parts carry it (camelCase; ``totalTokens`` as the AI SDK's usage has it)."""
    if usage is None:
        return None
    return {
        "model": usage.model,
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "totalTokens": usage.input_tokens + usage.output_tokens,
        "costUsd": usage.cost_usd,
        "latencyMs": usage.latency_ms,
        "attempts": usage.calls,
    }


def _displacement(event: SyncObservationStarted | ReflectionRequested | StaleOutcome) -> tuple[str, str]:
    """When a displacing event happened and why the cycle it displaced produced nothing."""
    if isinstance(event, StaleOutcome):
        return event.at, event.reason
    if isinstance(event, SyncObservationStarted):
        return event.started_at, f"synchronous observation {event.cycle_id} took over its messages"
    return event.requested_at, f"synchronous reflection {event.cycle_id} took over the log"


def _discarded(
    before: RecordState,
    after: RecordState,
    at: str,
    reason: str,
    ids: dict[str, Any],
    spent: Mapping[str, Usage] | None = None,
) -> list[Part]:
    """The closing part of each cycle that was in flight in ``before`` and no longer is in ``after``.

    Such a cycle produced nothing that was applied: its part is the ``-end`` of its kind with nothing
    observed or buffered, ``discarded: true`` and why. An ``-end``, not a ``-failed``: Mastra front ends
    stop the cycle's spinner on either, but treat a failure as an error to show (or abort on).
    """
    verdict = {"discarded": True, "reason": reason}
    parts: list[Part] = []
    usage_of = (spent or {}).get
    buffer = before.buffer_in_flight
    if buffer is not None and after.in_flight(buffer.cycle_id) is None:
        # bufferedTokens keeps its meaning, what is buffered after the cycle: the chunks that were there
        outcome = _unbuffered(after.chunk_observation_tokens, verdict)
        duration = _since(buffer.requested_at, at)
        parts.append(
            _end_part(
                BUFFERING_END,
                buffer.cycle_id,
                "observation",
                at,
                duration,
                outcome,
                ids,
                usage=usage_of(buffer.cycle_id),
            )
        )
    sync = before.sync_in_flight
    if sync is not None and after.in_flight(sync.cycle_id) is None:
        outcome, duration = _unobserved(verdict), _since(sync.started_at, at)
        parts.append(
            _end_part(
                OBSERVATION_END,
                sync.cycle_id,
                "observation",
                at,
                duration,
                outcome,
                ids,
                usage=usage_of(sync.cycle_id),
            )
        )
    reflecting = before.reflection_in_flight
    if reflecting is not None and after.in_flight(reflecting.cycle_id) is None:
        buffered = reflecting.mode == "buffered"
        outcome = _unbuffered(0, verdict) if buffered else _unobserved(verdict)
        part_type = BUFFERING_END if buffered else OBSERVATION_END
        duration = _since(reflecting.requested_at, at)
        parts.append(
            _end_part(
                part_type,
                reflecting.cycle_id,
                "reflection",
                at,
                duration,
                outcome,
                ids,
                usage=usage_of(reflecting.cycle_id),
            )
        )
    return parts


def _unbuffered(buffered_tokens: int, verdict: dict[str, Any]) -> dict[str, Any]:
    """A ``buffering-end`` outcome of a cycle that buffered nothing."""
    return {
        "tokensBuffered": 0,
        "bufferedTokens": buffered_tokens,
        "observations": "",
        "extractedValues": {},
        "extractionFailures": {},
        **verdict,
    }


def _unobserved(verdict: dict[str, Any]) -> dict[str, Any]:
    """An ``observation-end`` outcome of a cycle that observed nothing."""
    return {
        "tokensObserved": 0,
        "observationTokens": 0,
        "observations": "",
        "currentTask": None,
        "suggestedResponse": None,
        "extractedValues": {},
        "extractionFailures": {},
        **verdict,
    }


def _chunk_activations(
    event: ChunksActivated,
    before: RecordState,
    after: RecordState,
    config: MemoryConfig,
    ids: dict[str, Any],
) -> list[Part]:
    chunks = {c.cycle_id: c for c in before.chunks}
    parts: list[Part] = []
    for cycle_id in event.cycle_ids:
        chunk = chunks.get(cycle_id)
        parts.append(
            frame(
                ACTIVATION,
                cycle_id,
                {
                    "cycleId": cycle_id,
                    "operationType": "observation",
                    "activatedAt": event.activated_at,
                    "chunksActivated": 1,
                    "tokensActivated": chunk.message_tokens if chunk else 0,
                    "observationTokens": chunk.observation_tokens if chunk else 0,
                    "messagesActivated": len(chunk.message_ids) if chunk else 0,
                    "generationCount": after.generation,
                    "observations": chunk.observations if chunk else None,
                    "triggeredBy": _mastra_trigger(event.triggered_by),
                    "lastActivityAt": _epoch_ms(event.last_activity_at),
                    "ttlExpiredMs": event.ttl_expired_ms,
                    "previousModel": event.previous_model,
                    "currentModel": event.current_model,
                    **ids,
                    "config": _config(config, after),
                },
            )
        )
    return parts


def _failed(
    part_type: str,
    cycle_id: str,
    operation: str,
    failed_at: str,
    duration_ms: float,
    tokens: int,
    error: str,
    ids: dict[str, Any],
    usage: Usage,
) -> Part:
    return frame(
        part_type,
        cycle_id,
        {
            "cycleId": cycle_id,
            "operationType": operation,
            "failedAt": failed_at,
            "durationMs": duration_ms,
            "tokensAttempted": tokens,
            "error": error,
            "usage": usage_data(usage),
            **ids,
        },
    )


def _thread_ids(state: RecordState) -> list[str]:
    return [state.thread_id] if state.thread_id else []


def _config(config: MemoryConfig, state: RecordState) -> dict[str, Any]:
    limits = resolve_limits(config, state)
    out: dict[str, Any] = {
        "messageTokens": limits.message_threshold,
        "observationTokens": limits.observation_threshold,
        "scope": config.scope,
    }
    if config.activate_after_idle is not None:
        out["activateAfterIdle"] = config.activate_after_idle
    return out


def _mastra_trigger(triggered_by: str) -> str:
    # Mastra knows threshold, ttl and provider_change; blockAfter and manual activations are threshold-like
    return triggered_by if triggered_by in ("threshold", "ttl", "provider_change") else "threshold"


def _parse(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def _since(start: str | None, end: str) -> float:
    begin, finish = _parse(start), _parse(end)
    if begin is None or finish is None:
        return 0.0
    return max(0.0, round((finish - begin).total_seconds() * 1000, 3))


def _epoch_ms(stamp: str | None) -> int | None:
    moment = _parse(stamp)
    return None if moment is None else int(moment.timestamp() * 1000)
