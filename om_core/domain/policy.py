"""Policy: pure decisions from (record state, config, now, caller's model) to the next thing to do.

The application layer calls ``next_decision`` in a loop: each decision becomes an event, the event is
folded into the state, and the policy is asked again, until it answers ``None`` or asks for model work the
caller is not allowed to do (background work while appending, synchronous work only while reading).
Every decision changes the state so that the loop always ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from om_core.domain import thresholds
from om_core.domain.config import MemoryConfig
from om_core.domain.events import TriggeredBy
from om_core.domain.state import RecordState, WindowMessage
from om_core.domain.timeutil import parse_time
from om_core.domain.tokens import TOKENS_PER_CONVERSATION


@dataclass(frozen=True, slots=True)
class Limits:
    """Every threshold of docs/semantics.md (Thresholds, Buffering, Reflection) resolved for one record at one
    moment."""

    message_threshold: int  # T
    buffer_tokens: int | None  # B; None when buffering is off
    block_after: int | None  # A; None when buffering is off
    retention_floor: int
    observation_threshold: int  # R
    reflection_buffer_start: int | None  # R·reflection.bufferActivation; None when buffering is off
    reflection_block_after: int | None

    @property
    def buffering(self) -> bool:
        return self.buffer_tokens is not None


def resolve_limits(config: MemoryConfig, state: RecordState) -> Limits:
    observation = thresholds.resolve_observation_thresholds(config, state.observation_tokens)
    reflection = thresholds.resolve_reflection_thresholds(config)
    return Limits(
        message_threshold=observation.message_tokens,
        buffer_tokens=observation.buffer_tokens,
        block_after=observation.block_after,
        retention_floor=observation.retention_floor,
        observation_threshold=reflection.observation_tokens,
        reflection_buffer_start=reflection.buffer_start_tokens,
        reflection_block_after=reflection.block_after,
    )


# --- decisions --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestObservationBuffer:
    from_seq: int
    to_seq: int
    message_tokens: int
    pending_tokens: int
    trigger: Literal["interval", "idle", "manual"]


@dataclass(frozen=True, slots=True)
class ActivateChunks:
    count: int
    triggered_by: TriggeredBy
    last_activity_at: str | None = None
    ttl_expired_ms: int | None = None
    previous_model: str | None = None
    current_model: str | None = None


@dataclass(frozen=True, slots=True)
class ObserveSynchronously:
    from_seq: int
    to_seq: int
    message_tokens: int
    trigger: Literal["threshold", "block_after", "manual"]


@dataclass(frozen=True, slots=True)
class RequestReflection:
    mode: Literal["buffered", "sync"]
    line_count: int
    input_tokens: int
    target_tokens: int


@dataclass(frozen=True, slots=True)
class ActivateBufferedReflection:
    triggered_by: TriggeredBy


Decision = (
    RequestObservationBuffer
    | ActivateChunks
    | ObserveSynchronously
    | RequestReflection
    | ActivateBufferedReflection
)

Mode = Literal["append", "read", "work", "idle"]


def next_decision(
    state: RecordState,
    config: MemoryConfig,
    now: datetime,
    *,
    mode: Mode,
    caller_model: str | None = None,
) -> Decision | None:
    """The next step for this record.

    ``append`` and ``work`` (after a background result) may activate and request background work;
    ``read`` may in addition ask for synchronous observation and reflection (blockAfter); ``idle`` is the
    end of a turn or a sweep, where ``bufferOnIdle`` and idle TTLs apply.
    """
    limits = resolve_limits(config, state)
    return (
        _activation(state, config, limits, now, caller_model)
        or _observation_work(state, config, limits, mode)
        or _reflection(state, config, limits, mode)
    )


def same_model(a: str, b: str) -> bool:
    """Provider-change comparison (docs/semantics.md, Activation): ``provider/model`` ids compare the
    provider by its segment before the first dot (``openai.responses`` is ``openai``) and the model
    exactly; when either id is bare, only the model names are compared."""
    if "/" in a and "/" in b:
        provider_a, model_a = a.split("/", 1)
        provider_b, model_b = b.split("/", 1)
        return (
            provider_a.split(".", 1)[0].lower() == provider_b.split(".", 1)[0].lower() and model_a == model_b
        )
    return a.rsplit("/", 1)[-1] == b.rsplit("/", 1)[-1]


# --- observation ------------------------------------------------------------------------------------------


def _activation(
    state: RecordState, config: MemoryConfig, limits: Limits, now: datetime, caller_model: str | None
) -> ActivateChunks | None:
    if not state.chunks or state.sync_in_flight is not None:
        return None

    def count() -> int:
        return thresholds.select_chunks_to_activate(
            [c.message_tokens for c in state.chunks],
            pending_tokens=state.pending_tokens,
            threshold=limits.message_threshold,
            retention_floor=limits.retention_floor,
            block_after=limits.block_after,
        )

    # precedence: provider change, then TTL, then threshold (docs/semantics.md, Activation)
    if (
        thresholds.resolve_activate_on_provider_change(config)
        and caller_model
        and state.last_assistant_model
        and not same_model(caller_model, state.last_assistant_model)
    ):
        return ActivateChunks(
            count=count(),
            triggered_by="provider_change",
            previous_model=state.last_assistant_model,
            current_model=caller_model,
        )
    ttl_ms = thresholds.resolve_idle_ttl_ms(config, caller_model or state.last_assistant_model)
    if ttl_ms is not None and state.last_assistant_at is not None:
        idle_ms = int((now - parse_time(state.last_assistant_at)).total_seconds() * 1000)
        if idle_ms >= ttl_ms:
            return ActivateChunks(
                count=count(),
                triggered_by="ttl",
                last_activity_at=state.last_assistant_at,
                ttl_expired_ms=idle_ms,
            )
    if state.pending_tokens >= limits.message_threshold:
        return ActivateChunks(count=count(), triggered_by="threshold")
    return None


def _observation_work(
    state: RecordState, config: MemoryConfig, limits: Limits, mode: Mode
) -> RequestObservationBuffer | ObserveSynchronously | None:
    if state.sync_in_flight is not None:
        return None
    p = state.pending_tokens
    if mode == "read" and _must_observe_now(state, limits):
        return _sync_observation(state, limits, "block_after" if limits.buffering else "threshold")
    if not limits.buffering or limits.block_after is None or limits.buffer_tokens is None:
        return None
    if state.buffer_in_flight is not None:
        return None  # runs never overlap; this request is coalesced into the next one
    if state.buffer_retry_after_pending == p:
        return None
    candidates = _safe_buffer_prefix(state.unbuffered_messages)
    if not candidates:
        return None
    tokens = sum(m.tokens for m in candidates)
    if mode == "idle" and config.observation.buffer_on_idle:
        return _buffer_request(candidates, tokens, p, "idle")
    if p >= limits.block_after or tokens < limits.buffer_tokens / 2:
        return None
    observation = thresholds.resolve_observation_thresholds(config, state.observation_tokens)
    if thresholds.should_request_buffer(p, state.last_buffer_boundary, tokens, observation) or (
        p >= limits.message_threshold and not state.chunks
    ):
        return _buffer_request(candidates, tokens, p, "interval")
    return None


def _buffer_request(
    candidates: list[WindowMessage], tokens: int, pending: int, trigger: Literal["interval", "idle"]
) -> RequestObservationBuffer:
    return RequestObservationBuffer(
        from_seq=candidates[0].seq,
        to_seq=candidates[-1].seq,
        message_tokens=tokens,
        pending_tokens=pending,
        trigger=trigger,
    )


def _must_observe_now(state: RecordState, limits: Limits) -> bool:
    """Whether a context read has to observe before it returns (docs/semantics.md, blockAfter and synchronous
    observation; Without buffering)."""
    p = state.pending_tokens
    if not limits.buffering or limits.block_after is None:
        return p >= limits.message_threshold
    if p >= limits.block_after:
        return True
    # at the threshold with nothing buffered and no run that could catch up
    return p >= limits.message_threshold and not state.chunks and state.buffer_in_flight is None


def _sync_observation(
    state: RecordState, limits: Limits, trigger: Literal["threshold", "block_after"]
) -> ObserveSynchronously | None:
    """Observe everything unobserved except the newest messages that fit in the retention floor.

    Chunks are activated before this is asked (activation precedes it in ``next_decision``), so the range
    starts right after the cursor. Keeping a small raw tail leaves the newest turn verbatim for the agent.
    """
    window = state.window
    if not window:
        return None
    kept = 0
    cut = len(window)
    while cut > 0 and kept + window[cut - 1].tokens <= limits.retention_floor:
        cut -= 1
        kept += window[cut].tokens
    # the window must end up below the threshold whatever the floor says
    while cut < len(window) and kept + TOKENS_PER_CONVERSATION >= limits.message_threshold:
        kept -= window[cut].tokens
        cut += 1
    if cut == 0:
        return None
    observed = window[:cut]
    return ObserveSynchronously(
        from_seq=observed[0].seq,
        to_seq=observed[-1].seq,
        message_tokens=sum(m.tokens for m in observed),
        trigger=trigger,
    )


def _safe_buffer_prefix(candidates: list[WindowMessage]) -> list[WindowMessage]:
    """Leave a trailing tool call whose result has not arrived out of the chunk (docs/semantics.md,
    Buffering)."""
    end = len(candidates)
    while end > 0 and candidates[end - 1].pending_tool_call:
        end -= 1
    return candidates[:end]


# --- reflection -------------------------------------------------------------------------------------------


def _reflection(
    state: RecordState, config: MemoryConfig, limits: Limits, mode: Mode
) -> RequestReflection | ActivateBufferedReflection | None:
    o = state.observation_tokens
    r = limits.observation_threshold
    if o == 0 or state.sync_in_flight is not None:
        return None
    if state.buffered_reflection is not None and o >= r:
        return ActivateBufferedReflection(triggered_by="threshold")
    in_flight = state.reflection_in_flight
    if mode == "read" and _must_reflect_now(state, limits):
        if in_flight is not None and in_flight.mode == "sync":
            return None
        lines = state.log_lines()
        return RequestReflection(mode="sync", line_count=len(lines), input_tokens=o, target_tokens=r)
    if (
        limits.reflection_buffer_start is not None
        and in_flight is None
        and state.buffered_reflection is None
        and o >= limits.reflection_buffer_start
        and state.reflection_retry_after_tokens != o
    ):
        lines = state.log_lines()
        line_count = thresholds.buffered_reflection_line_count(
            o, len(lines), r, config.reflection.buffer_activation
        )
        if line_count <= 0:
            return None
        slice_tokens = round(o / len(lines) * line_count)
        return RequestReflection(
            mode="buffered",
            line_count=line_count,
            input_tokens=slice_tokens,
            target_tokens=round(0.75 * slice_tokens),
        )
    return None


def _must_reflect_now(state: RecordState, limits: Limits) -> bool:
    o = state.observation_tokens
    if state.reflection_suppressed_at == o:
        return False  # an identical over-threshold retry would produce the same result
    if limits.reflection_block_after is None:
        return o >= limits.observation_threshold
    return o >= limits.reflection_block_after and state.buffered_reflection is None
