"""The record state (the context-window read model) and the pure fold that builds it from events.

The state only holds what the context window needs: the unobserved messages, the buffered chunks, the
current generation's observation log and the bookkeeping of work in flight. Its size is bounded by the
thresholds, not by the length of the conversation, so reading it stays flat as streams grow.

``fold`` is total over valid histories and strict about invalid ones: an event that does not line up with
the state (a chunk that skips messages, an activation of chunks that are not there) raises
``InvariantViolation`` rather than producing a silently wrong window. Results are validated by the
application layer before they are recorded, so a recorded stream always folds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Literal, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from om_core.domain.events import (
    ChunksActivated,
    ContextReturnedOverBudget,
    DomainEvent,
    MessageAppended,
    ObservationBufferCompleted,
    ObservationBufferFailed,
    ObservationBufferRequested,
    ObservationBufferStale,
    ObservationBufferStarted,
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
    ThreadConfigured,
    ThreadTitleChanged,
    ValuesExtracted,
)
from om_core.domain.json_text import sorted_json
from om_core.domain.profiles import DEFAULT_PROFILE
from om_core.domain.tokens import TOKENS_PER_CONVERSATION


class InvariantViolation(Exception):
    """An event cannot be applied to the state it was folded onto."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class WindowMessage(_Model):
    seq: int
    message_id: str
    kind: Literal["message", "marker"] = "message"
    role: str
    thread_id: str | None
    tokens: int
    created_at: str
    model: str | None = None
    # a tool call whose result has not arrived: such a message stays out of a chunk until it has
    pending_tool_call: bool = False
    # the message as stored, as JSON text: the state is read and written on every call, and a body kept
    # as text costs a string copy there instead of a nested parse; it is parsed only where it is used
    body: str

    @property
    def message(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed


class Chunk(_Model):
    cycle_id: str
    from_seq: int
    to_seq: int
    message_ids: list[str]
    message_tokens: int
    observations: str
    observation_tokens: int
    last_observed_at: str
    current_task: str | None = None
    suggested_response: str | None = None


class LogSegment(_Model):
    """One block of the observation log. Blocks are never edited, so earlier ones stay byte-stable."""

    text: str
    tokens: int
    kind: Literal["activation", "sync", "reflection", "carried"]
    boundary_at: str | None = None
    cycle_ids: list[str] = []


class BufferInFlight(_Model):
    cycle_id: str
    from_seq: int
    to_seq: int
    message_tokens: int
    requested_at: str
    started: bool = False


class SyncInFlight(_Model):
    cycle_id: str
    from_seq: int
    to_seq: int
    message_tokens: int
    started_at: str


class ReflectionInFlight(_Model):
    cycle_id: str
    mode: Literal["buffered", "sync"]
    generation: int
    line_count: int
    input_tokens: int
    target_tokens: int
    requested_at: str


InFlight = BufferInFlight | SyncInFlight | ReflectionInFlight
_Kind = TypeVar("_Kind", bound=InFlight)


class BufferedReflection(_Model):
    cycle_id: str
    generation: int
    line_count: int
    input_tokens: int
    text: str
    tokens: int


class GenerationInfo(_Model):
    generation: int
    started_at_version: int
    observation_tokens_at_start: int
    cycle_id: str | None = None


class RecordStats(_Model):
    messages: int = 0
    observer_calls: int = 0
    observer_failures: int = 0
    reflector_calls: int = 0
    reflector_failures: int = 0
    buffered_chunks: int = 0
    stale_results: int = 0
    activations: int = 0
    chunks_activated: int = 0
    sync_observations: int = 0
    reflections: int = 0
    messages_observed_tokens: int = 0
    observations_written_tokens: int = 0
    over_budget_returns: int = 0


class RecordState(_Model):
    stream_id: str
    version: int = 0
    # the global position of the event at ``version`` (0: not known), which names this lineage of the
    # stream: set by whoever read or wrote the state, reset by the fold, kept out of the stored document
    position: int = Field(default=0, exclude=True)
    thread_id: str | None = None
    resource_id: str | None = None
    title: str | None = None
    thread_metadata: dict[str, Any] = {}
    config_overrides: dict[str, Any] = {}
    # the thread's named profile (None: the default). Left out of the stored row while unset, so records
    # written before profiles existed still compare equal to their fold
    profile: str | None = Field(default=None, exclude_if=lambda value: value is None)

    next_seq: int = 1
    observed_seq: int = 0
    last_observed_at: str | None = None
    window: list[WindowMessage] = []
    chunks: list[Chunk] = []
    buffer_in_flight: BufferInFlight | None = None
    last_buffer_boundary: int = 0
    # after a failed background run, wait for new messages before asking again (no hot retry loop)
    buffer_retry_after_pending: int | None = None
    sync_in_flight: SyncInFlight | None = None

    log: list[LogSegment] = []
    observation_tokens: int = 0
    generation: int = 0
    generations: list[GenerationInfo] = Field(
        default_factory=lambda: [
            GenerationInfo(generation=0, started_at_version=0, observation_tokens_at_start=0)
        ]
    )
    reflection_in_flight: ReflectionInFlight | None = None
    buffered_reflection: BufferedReflection | None = None
    reflection_suppressed_at: int | None = None
    reflection_retry_after_tokens: int | None = None

    current_task: str | None = None
    suggested_response: str | None = None
    extracted: dict[str, Any] = {}
    # the working-memory document the Observer keeps, and the outcome that last wrote it
    working_memory: str | None = None
    working_memory_cycle_id: str | None = None
    working_memory_updated_at: str | None = None

    last_message_at: str | None = None
    last_assistant_at: str | None = None
    last_assistant_model: str | None = None
    stats: RecordStats = RecordStats()

    # --- derived quantities (pure reads) -------------------------------------------------------------

    # (the window list summed, its length then, the sum): the policy asks for P several times per decision
    _window_tokens: tuple[list[WindowMessage], int, int] | None = PrivateAttr(default=None)

    # the segments the stored record row holds for this log (None: unknown, so the next write stores it):
    # the row keeps the log apart and an append that leaves the log alone does not rewrite it
    _log_in_row: list[LogSegment] | None = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        # the fields are the state; the private bookkeeping is not
        return isinstance(other, RecordState) and self.__dict__ == other.__dict__

    @property
    def _private(self) -> dict[str, Any]:
        # the private attributes' own dict: ``self._window_tokens`` goes through BaseModel.__getattr__,
        # about 35 times the cost of a field, and P alone is asked for a dozen times per turn
        private = self.__pydantic_private__
        assert private is not None
        return private

    def log_matches_row(self) -> bool:
        """Whether the stored row holds exactly this log (segments are never edited: identity suffices)."""
        row = self._private["_log_in_row"]
        if row is None or len(row) != len(self.log):
            return False
        return all(a is b for a, b in zip(row, self.log, strict=True))

    def mark_log_stored(self) -> None:
        self._private["_log_in_row"] = list(self.log)

    @property
    def pending_tokens(self) -> int:
        """P: tokens of the unobserved messages still in the window, with the conversation overhead."""
        window = self.window
        if not window:
            return 0
        # the fold only appends to the window or replaces the list, so the same list holds the messages
        # it held, and what was appended since is counted on top
        private = self._private
        memo = private["_window_tokens"]
        length = len(window)
        if memo is not None and memo[0] is window and memo[1] == length:
            return TOKENS_PER_CONVERSATION + int(memo[2])
        if memo is None or memo[0] is not window or memo[1] > length:
            total = sum(m.tokens for m in window)
        else:
            total = memo[2] + sum(window[i].tokens for i in range(memo[1], length))
        private["_window_tokens"] = (window, length, total)
        return TOKENS_PER_CONVERSATION + total

    @overload
    def in_flight(self, cycle_id: str) -> InFlight | None: ...

    @overload
    def in_flight(self, cycle_id: str, kind: type[_Kind]) -> _Kind | None: ...

    def in_flight(self, cycle_id: str, kind: type[_Kind] | None = None) -> InFlight | None:
        """The slot holding cycle ``cycle_id`` while it is in flight (of ``kind``, when given), else None:
        whether a result, a wait or a task still concerns the record as it is now."""
        for flight in (self.buffer_in_flight, self.sync_in_flight, self.reflection_in_flight):
            if flight is None or flight.cycle_id != cycle_id:
                continue
            if kind is None or isinstance(flight, kind):
                return flight
        return None

    @property
    def last_seq(self) -> int:
        return self.next_seq - 1

    @property
    def buffered_through_seq(self) -> int:
        """The newest message covered by a chunk or by a buffer run in flight."""
        through = self.observed_seq
        if self.chunks:
            through = max(through, self.chunks[-1].to_seq)
        if self.buffer_in_flight is not None:
            through = max(through, self.buffer_in_flight.to_seq)
        return through

    @property
    def unbuffered_messages(self) -> list[WindowMessage]:
        through = self.buffered_through_seq
        return [m for m in self.window if m.seq > through]

    @property
    def chunk_message_tokens(self) -> int:
        return sum(c.message_tokens for c in self.chunks)

    @property
    def chunk_observation_tokens(self) -> int:
        return sum(c.observation_tokens for c in self.chunks)

    def log_lines(self) -> list[str]:
        lines: list[str] = []
        for segment in self.log:
            lines.extend(segment.text.split("\n"))
        return lines

    def log_text(self) -> str:
        return "\n".join(segment.text for segment in self.log)

    @property
    def has_fresh_observations(self) -> bool:
        """Whether observations were added since the current generation began: within a generation the
        log only grows, so it is then larger than it started."""
        return self.observation_tokens > self.generations[-1].observation_tokens_at_start

    @property
    def has_work_pending(self) -> bool:
        """Chunks waiting for activation or a cycle in flight: what an idle sweep or a recovery looks at."""
        return bool(self.chunks or self.buffer_in_flight or self.sync_in_flight or self.reflection_in_flight)

    def fork(self) -> RecordState:
        """A copy that can be evolved without changing this one, in time proportional to the window's
        length rather than its bytes: lists are copied but share their elements, because the fold never
        changes a message, chunk or log segment once it is in the state; the few objects it does change
        in place (the stats, a buffer run in flight) are copied."""
        window = list(self.window)
        copy = self.model_copy(
            update={
                "thread_metadata": dict(self.thread_metadata),
                "config_overrides": dict(self.config_overrides),
                "window": window,
                "chunks": list(self.chunks),
                "log": list(self.log),
                "generations": list(self.generations),
                "buffer_in_flight": self.buffer_in_flight.model_copy() if self.buffer_in_flight else None,
                "extracted": dict(self.extracted),
                "stats": self.stats.model_copy(),
            }
        )
        # the copy's window holds the same messages: their count carries over, so the copy's first
        # append adds one message's tokens instead of summing the window again
        memo = self._private["_window_tokens"]
        if memo is not None and memo[0] is self.window and memo[1] == len(window):
            copy._private["_window_tokens"] = (window, memo[1], memo[2])
        return copy

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def initial_state(stream_id: str) -> RecordState:
    return RecordState(stream_id=stream_id)


def fold(state: RecordState, events: Iterable[DomainEvent], *, version: int | None = None) -> RecordState:
    """Apply ``events`` in order to a copy of ``state``; the input is never modified."""
    return evolve(state.fork(), events, version=version)


def evolve(state: RecordState, events: Iterable[DomainEvent], *, version: int | None = None) -> RecordState:
    """Apply ``events`` to ``state`` itself and return it: for the owner of a state nobody else reads,
    such as a plan being built, where copying the whole state for every event would dominate the cost."""
    for event in events:
        state.version += 1
        state.position = 0
        _apply(state, event)
    if version is not None:
        state.version = version
    return state


def apply(state: RecordState, event: DomainEvent) -> RecordState:
    return fold(state, [event])


# --- the transitions --------------------------------------------------------------------------------------


def _apply(s: RecordState, e: DomainEvent) -> None:
    handler = _HANDLERS.get(type(e))
    if handler is None:
        raise InvariantViolation(f"no transition for event type {e.event_type}")
    handler(s, e)


def _thread_configured(s: RecordState, e: ThreadConfigured) -> None:
    if s.thread_id is None:
        s.thread_id = e.thread_id
    if e.resource_id is not None:
        s.resource_id = e.resource_id
    if e.title is not None:
        s.title = e.title
    if e.metadata is not None:
        s.thread_metadata = dict(e.metadata)
    if e.config is not None:
        s.config_overrides = dict(e.config)
    if e.profile is not None:
        s.profile = None if e.profile == DEFAULT_PROFILE else e.profile


def _expect_seq(s: RecordState, seq: int, what: str) -> None:
    if seq != s.next_seq:
        raise InvariantViolation(f"{what} has seq {seq}, expected {s.next_seq}")


def window_message(
    *,
    seq: int,
    message_id: str,
    role: str,
    thread_id: str | None,
    tokens: int,
    created_at: str,
    model: str | None,
    message: dict[str, Any],
) -> WindowMessage:
    """A stored message as the window holds it: from its event (the fold) or its projection row."""
    body = _compact(message)
    return WindowMessage(
        seq=seq,
        message_id=message_id,
        role=role,
        thread_id=thread_id,
        tokens=tokens,
        created_at=created_at,
        model=model,
        # only a message with a tool part can wait for a result: the text says whether it has one
        pending_tool_call='"tool-invocation"' in body and _has_pending_tool_call(message),
        body=body,
    )


def _message_appended(s: RecordState, e: MessageAppended) -> None:
    _expect_seq(s, e.seq, f"message {e.message_id!r}")
    s.window.append(
        window_message(
            seq=e.seq,
            message_id=e.message_id,
            role=e.role,
            thread_id=e.thread_id,
            tokens=e.tokens,
            created_at=e.created_at,
            model=e.model,
            message=e.message,
        )
    )
    s.next_seq += 1
    s.stats.messages += 1
    s.last_message_at = e.created_at
    if e.resource_id is not None and s.resource_id is None:
        s.resource_id = e.resource_id
    if e.role == "assistant":
        s.last_assistant_at = _last_activity_at(e.message, e.created_at)
        if e.model:
            s.last_assistant_model = e.model


def _compact(message: dict[str, Any]) -> str:
    # canonical: jsonb does not keep key order, and a replay must give the very same text
    return sorted_json(message)


def _has_pending_tool_call(message: dict[str, Any]) -> bool:
    return any(
        isinstance(part, dict)
        and part.get("type") == "tool-invocation"
        and part.get("state") in ("call", "partial-call", "approval-requested")
        for part in message.get("parts", [])
    )


def _last_activity_at(message: dict[str, Any], created_at: str) -> str:
    """The time of the last non-data part: trailing ``data-*`` parts are not assistant activity."""
    for part in reversed(message.get("parts", [])):
        if not isinstance(part, dict) or str(part.get("type", "")).startswith("data-"):
            continue
        part_time = part.get("createdAt")
        return part_time if isinstance(part_time, str) else created_at
    return created_at


def _temporal_marker(s: RecordState, e: TemporalMarkerInserted) -> None:
    _expect_seq(s, e.seq, f"temporal marker {e.marker_id!r}")
    s.window.append(
        WindowMessage(
            seq=e.seq,
            message_id=e.marker_id,
            kind="marker",
            role="system",
            thread_id=e.thread_id,
            tokens=e.tokens,
            created_at=e.created_at,
            body=_compact(
                {
                    "id": e.marker_id,
                    "role": "system",
                    "parts": [{"type": "text", "text": e.text}],
                    "createdAt": e.created_at,
                },
            ),
        )
    )
    s.next_seq += 1


def _buffer_requested(s: RecordState, e: ObservationBufferRequested) -> None:
    if s.buffer_in_flight is not None:
        raise InvariantViolation(f"buffer {e.cycle_id} requested while {s.buffer_in_flight.cycle_id} runs")
    if e.from_seq != s.buffered_through_seq + 1 or e.to_seq < e.from_seq or e.to_seq > s.last_seq:
        raise InvariantViolation(
            f"buffer {e.cycle_id} range {e.from_seq}..{e.to_seq} does not start after "
            f"seq {s.buffered_through_seq} or ends beyond {s.last_seq}"
        )
    s.buffer_in_flight = BufferInFlight(
        cycle_id=e.cycle_id,
        from_seq=e.from_seq,
        to_seq=e.to_seq,
        message_tokens=e.message_tokens,
        requested_at=e.requested_at,
    )
    s.last_buffer_boundary = e.pending_tokens


_KIND_NAMES: dict[type[_Model], str] = {
    BufferInFlight: "buffer cycle",
    SyncInFlight: "sync observation",
    ReflectionInFlight: "reflection",
}


def _require(s: RecordState, cycle_id: str, kind: type[_Kind]) -> _Kind:
    """The flight an outcome of cycle ``cycle_id`` closes: it must be in flight, in its kind's slot."""
    flight = s.in_flight(cycle_id, kind)
    if flight is None:
        raise InvariantViolation(f"{_KIND_NAMES[kind]} {cycle_id} is not in flight")
    return flight


def _buffer_started(s: RecordState, e: ObservationBufferStarted) -> None:
    _require(s, e.cycle_id, BufferInFlight).started = True


def _buffer_completed(s: RecordState, e: ObservationBufferCompleted) -> None:
    flight = _require(s, e.cycle_id, BufferInFlight)
    if (e.from_seq, e.to_seq) != (flight.from_seq, flight.to_seq):
        raise InvariantViolation(f"chunk {e.cycle_id} covers {e.from_seq}..{e.to_seq}, not the request")
    if e.from_seq != max(s.observed_seq, s.chunks[-1].to_seq if s.chunks else 0) + 1:
        raise InvariantViolation(f"chunk {e.cycle_id} does not follow the previous chunk")
    s.buffer_in_flight = None
    s.stats.observer_calls += e.usage.calls
    if not e.observations.strip():
        # an empty Observer answer leaves the messages unbuffered; they are offered again with new messages
        s.buffer_retry_after_pending = s.pending_tokens
        return
    s.buffer_retry_after_pending = None
    s.chunks.append(
        Chunk(
            cycle_id=e.cycle_id,
            from_seq=e.from_seq,
            to_seq=e.to_seq,
            message_ids=list(e.message_ids),
            message_tokens=e.message_tokens,
            observations=e.observations,
            observation_tokens=e.observation_tokens,
            last_observed_at=e.last_observed_at,
            current_task=e.current_task,
            suggested_response=e.suggested_response,
        )
    )
    s.stats.buffered_chunks += 1
    _merge_extracted(s, e.extracted)
    # at buffering, not at activation: every update is the whole document, written from the document as
    # it stood, so the next buffer run must see this one or it would drop it; and the document holds
    # facts, not the messages a chunk replaces, so showing it early duplicates nothing
    _update_working_memory(s, e)


def _buffer_failed(s: RecordState, e: ObservationBufferFailed) -> None:
    _require(s, e.cycle_id, BufferInFlight)
    s.buffer_in_flight = None
    # a model that failed waits for new messages before it is asked again; work that was lost is asked
    # for again at once, as if that run had never been requested
    if e.reason is None:
        s.buffer_retry_after_pending = s.pending_tokens
    else:
        s.last_buffer_boundary = 0
    s.stats.observer_calls += e.attempts
    s.stats.observer_failures += 1


_STALE_SLOTS: dict[type[StaleOutcome], str] = {
    ObservationBufferStale: "buffer_in_flight",
    SyncObservationStale: "sync_in_flight",
    ReflectionStale: "reflection_in_flight",
}


def _stale(s: RecordState, e: StaleOutcome) -> None:
    """Recorded, never applied: it only frees its kind's slot if its cycle still holds it."""
    slot = _STALE_SLOTS[type(e)]
    flight = s.in_flight(e.cycle_id)
    if flight is not None and flight is getattr(s, slot):
        setattr(s, slot, None)
    s.stats.stale_results += 1


def _drop_window_through(s: RecordState, through_seq: int) -> None:
    s.window = [m for m in s.window if m.seq > through_seq]


def _chunks_activated(s: RecordState, e: ChunksActivated) -> None:
    count = len(e.cycle_ids)
    prefix = s.chunks[:count]
    if count == 0 or [c.cycle_id for c in prefix] != e.cycle_ids:
        raise InvariantViolation(f"activation of {e.cycle_ids} is not a prefix of the buffered chunks")
    if prefix[-1].to_seq != e.through_seq:
        raise InvariantViolation("activation cursor does not match the last activated chunk")
    text = "\n\n".join(c.observations.strip("\n") for c in prefix)
    s.log.append(
        LogSegment(
            text=text,
            tokens=sum(c.observation_tokens for c in prefix),
            kind="activation",
            boundary_at=prefix[-1].last_observed_at,
            cycle_ids=list(e.cycle_ids),
        )
    )
    s.observation_tokens += sum(c.observation_tokens for c in prefix)
    s.chunks = s.chunks[count:]
    _advance_cursor(s, e.through_seq, prefix[-1].last_observed_at)
    # hints survive activation: the newest activated chunk that has one sets it, else the record keeps its own
    task = next((c.current_task for c in reversed(prefix) if c.current_task), None)
    suggestion = next((c.suggested_response for c in reversed(prefix) if c.suggested_response), None)
    if task:
        s.current_task = task
    if suggestion:
        s.suggested_response = suggestion
    s.last_buffer_boundary = 0
    s.stats.activations += 1
    s.stats.chunks_activated += count
    s.stats.messages_observed_tokens += e.message_tokens
    s.stats.observations_written_tokens += sum(c.observation_tokens for c in prefix)


def _advance_cursor(s: RecordState, through_seq: int, observed_at: str | None) -> None:
    if through_seq < s.observed_seq:
        raise InvariantViolation(f"cursor would move backwards from {s.observed_seq} to {through_seq}")
    s.observed_seq = through_seq
    _drop_window_through(s, through_seq)
    if observed_at is not None and (s.last_observed_at is None or observed_at > s.last_observed_at):
        s.last_observed_at = observed_at


def _sync_started(s: RecordState, e: SyncObservationStarted) -> None:
    if s.sync_in_flight is not None:
        raise InvariantViolation(f"sync observation {e.cycle_id} started while another runs")
    if e.from_seq != s.observed_seq + 1 or [c.cycle_id for c in s.chunks] != e.discarded_chunks:
        raise InvariantViolation(
            "sync observation must start right after the cursor and discard exactly the chunks left"
        )
    # what is left reaches into the newest turn, which the observation does not take: kept, it would
    # observe again what this observation covers
    s.chunks = []
    s.sync_in_flight = SyncInFlight(
        cycle_id=e.cycle_id,
        from_seq=e.from_seq,
        to_seq=e.to_seq,
        message_tokens=e.message_tokens,
        started_at=e.started_at,
    )
    # a background run over the same messages can no longer be applied: it is superseded
    s.buffer_in_flight = None


def _sync_completed(s: RecordState, e: SyncObservationCompleted) -> None:
    flight = _require(s, e.cycle_id, SyncInFlight)
    if (e.from_seq, e.to_seq) != (flight.from_seq, flight.to_seq) or e.from_seq != s.observed_seq + 1:
        raise InvariantViolation(f"sync observation {e.cycle_id} does not cover its requested range")
    s.sync_in_flight = None
    s.stats.observer_calls += e.usage.calls
    if e.observations.strip():
        s.log.append(
            LogSegment(
                text=e.observations.strip("\n"),
                tokens=e.observation_tokens,
                kind="sync",
                boundary_at=e.last_observed_at,
                cycle_ids=[e.cycle_id],
            )
        )
        s.observation_tokens += e.observation_tokens
    s.chunks = [c for c in s.chunks if c.to_seq > e.to_seq]
    _advance_cursor(s, e.to_seq, e.last_observed_at)
    if e.current_task:
        s.current_task = e.current_task
    if e.suggested_response:
        s.suggested_response = e.suggested_response
    _merge_extracted(s, e.extracted)
    _update_working_memory(s, e)
    s.last_buffer_boundary = 0
    s.stats.sync_observations += 1
    s.stats.messages_observed_tokens += e.message_tokens
    s.stats.observations_written_tokens += e.observation_tokens


def _sync_failed(s: RecordState, e: SyncObservationFailed) -> None:
    _require(s, e.cycle_id, SyncInFlight)
    s.sync_in_flight = None
    s.stats.observer_calls += e.attempts
    s.stats.observer_failures += 1


def _reflection_requested(s: RecordState, e: ReflectionRequested) -> None:
    running = s.reflection_in_flight
    # a synchronous reflection supersedes a background one; its result will be recorded as stale
    if running is not None and not (e.mode == "sync" and running.mode == "buffered"):
        raise InvariantViolation(f"reflection {e.cycle_id} requested while {running.cycle_id} runs")
    if e.generation != s.generation or not 0 < e.line_count <= len(s.log_lines()):
        raise InvariantViolation(f"reflection {e.cycle_id} does not match the current log")
    s.reflection_in_flight = ReflectionInFlight(
        cycle_id=e.cycle_id,
        mode=e.mode,
        generation=e.generation,
        line_count=e.line_count,
        input_tokens=e.input_tokens,
        target_tokens=e.target_tokens,
        requested_at=e.requested_at,
    )


def _reflection_buffered(s: RecordState, e: ReflectionBuffered) -> None:
    flight = _require(s, e.cycle_id, ReflectionInFlight)
    if flight.generation != s.generation or e.line_count != flight.line_count:
        raise InvariantViolation(f"buffered reflection {e.cycle_id} belongs to another generation")
    s.reflection_in_flight = None
    s.stats.reflector_calls += e.usage.calls
    # written when buffered, not at activation (as Mastra): they describe the memory whether or not this
    # text is ever activated
    _merge_extracted(s, e.extracted)
    if e.tokens >= e.input_tokens:
        # it did not condense its slice: activating it would only start an identical generation, and
        # asking again at the same size would loop (Mastra #14109); wait for the log to change
        s.reflection_retry_after_tokens = s.observation_tokens
        return
    s.reflection_retry_after_tokens = None
    s.buffered_reflection = BufferedReflection(
        cycle_id=e.cycle_id,
        generation=e.generation,
        line_count=e.line_count,
        input_tokens=e.input_tokens,
        text=e.text,
        tokens=e.tokens,
    )


def _start_generation(
    s: RecordState, *, text: str, tokens: int, line_count: int, total_tokens: int, cycle_id: str
) -> None:
    """Replace the first ``line_count`` log lines by ``text``; lines written after the slice are kept."""
    kept: list[LogSegment] = []
    carried: LogSegment | None = None
    remaining = line_count
    for segment in s.log:
        lines = segment.text.split("\n")
        if remaining >= len(lines):
            remaining -= len(lines)
            continue
        if remaining > 0:
            carried = LogSegment(
                text="\n".join(lines[remaining:]),
                tokens=0,
                kind="carried",
                boundary_at=segment.boundary_at,
                cycle_ids=segment.cycle_ids,
            )
            kept.append(carried)
            remaining = 0
        else:
            kept.append(segment)
    if carried is not None:
        # the only segment whose size the fold cannot know is the partially carried one: it gets what is left
        carried.tokens = max(0, total_tokens - tokens - sum(seg.tokens for seg in kept))
    s.log = [LogSegment(text=text, tokens=tokens, kind="reflection", cycle_ids=[cycle_id]), *kept]
    s.observation_tokens = total_tokens
    s.generation += 1
    s.generations.append(
        GenerationInfo(
            generation=s.generation,
            started_at_version=s.version,
            observation_tokens_at_start=total_tokens,
            cycle_id=cycle_id,
        )
    )
    s.buffered_reflection = None
    s.stats.reflections += 1


def _reflection_activated(s: RecordState, e: ReflectionActivated) -> None:
    buffered = s.buffered_reflection
    if buffered is None or buffered.cycle_id != e.cycle_id or buffered.generation != s.generation:
        raise InvariantViolation(f"no buffered reflection {e.cycle_id} to activate")
    if e.new_generation != s.generation + 1:
        raise InvariantViolation(f"reflection {e.cycle_id} would start generation {e.new_generation}")
    _start_generation(
        s,
        text=buffered.text,
        tokens=buffered.tokens,
        line_count=buffered.line_count,
        total_tokens=e.observation_tokens,
        cycle_id=e.cycle_id,
    )


def _reflection_completed(s: RecordState, e: ReflectionCompleted) -> None:
    flight = _require(s, e.cycle_id, ReflectionInFlight)
    if flight.generation != s.generation or e.new_generation != s.generation + 1:
        raise InvariantViolation(f"reflection {e.cycle_id} was computed on another generation")
    s.reflection_in_flight = None
    s.stats.reflector_calls += e.usage.calls
    _start_generation(
        s,
        text=e.text,
        tokens=e.tokens,
        line_count=e.line_count,
        total_tokens=e.observation_tokens,
        cycle_id=e.cycle_id,
    )
    s.reflection_suppressed_at = s.observation_tokens if e.over_target else None
    _merge_extracted(s, e.extracted)
    if e.suggested_response:
        s.suggested_response = e.suggested_response


def _reflection_failed(s: RecordState, e: ReflectionFailed) -> None:
    _require(s, e.cycle_id, ReflectionInFlight)
    s.reflection_in_flight = None
    s.stats.reflector_failures += 1
    if e.reason is not None:
        # the work was lost, not the Reflector's answer: its calls are unknown, and it is asked for again
        s.stats.reflector_calls += len(e.levels_tried)
        return
    s.stats.reflector_calls += max(1, len(e.levels_tried))
    if e.mode == "sync":
        s.reflection_suppressed_at = e.observation_tokens
    else:
        s.reflection_retry_after_tokens = e.observation_tokens


def _title_changed(s: RecordState, e: ThreadTitleChanged) -> None:
    s.title = e.new_title


def _values_extracted(s: RecordState, e: ValuesExtracted) -> None:
    _merge_extracted(s, e.values)


def _merge_extracted(s: RecordState, values: dict[str, Any]) -> None:
    if values:
        s.extracted = {**s.extracted, **values}


def _update_working_memory(s: RecordState, e: ObservationBufferCompleted | SyncObservationCompleted) -> None:
    if e.working_memory is not None:
        s.working_memory = e.working_memory
        s.working_memory_cycle_id = e.cycle_id
        s.working_memory_updated_at = e.completed_at


def _over_budget(s: RecordState, e: ContextReturnedOverBudget) -> None:
    s.stats.over_budget_returns += 1


_HANDLERS: dict[type[DomainEvent], Any] = {
    ThreadConfigured: _thread_configured,
    MessageAppended: _message_appended,
    TemporalMarkerInserted: _temporal_marker,
    ObservationBufferRequested: _buffer_requested,
    ObservationBufferStarted: _buffer_started,
    ObservationBufferCompleted: _buffer_completed,
    ObservationBufferFailed: _buffer_failed,
    ObservationBufferStale: _stale,
    ChunksActivated: _chunks_activated,
    SyncObservationStarted: _sync_started,
    SyncObservationCompleted: _sync_completed,
    SyncObservationFailed: _sync_failed,
    SyncObservationStale: _stale,
    ReflectionRequested: _reflection_requested,
    ReflectionBuffered: _reflection_buffered,
    ReflectionActivated: _reflection_activated,
    ReflectionCompleted: _reflection_completed,
    ReflectionFailed: _reflection_failed,
    ReflectionStale: _stale,
    ThreadTitleChanged: _title_changed,
    ValuesExtracted: _values_extracted,
    ContextReturnedOverBudget: _over_budget,
}
