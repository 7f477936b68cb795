"""Policy: pure decisions from (record state, config, now, caller's model) to the next thing to do.

The application layer calls ``next_decision`` in a loop: each decision becomes an event, the event is
folded into the state, and the policy is asked again, until it answers ``None`` or asks for model work the
caller is not allowed to do (background work while appending, synchronous work only while reading).
Every decision changes the state so that the loop always ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from om_core.domain import thresholds
from om_core.domain.config import MemoryConfig
from om_core.domain.events import TriggeredBy
from om_core.domain.identity_memo import IdentityMemo
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


# the limits last resolved for each config, with the observation tokens they are for: a turn asks for them a
# dozen times, of one config parsed once per profile, at one log size
_RESOLVED: IdentityMemo[Limits] = IdentityMemo(256)


def resolve_limits(config: MemoryConfig, state: RecordState) -> Limits:
    observation_tokens = state.observation_tokens
    limits = _RESOLVED.get(config, observation_tokens)
    if limits is None:
        limits = _limits(config, observation_tokens)
        _RESOLVED.put(config, observation_tokens, limits)
    return limits


def _limits(config: MemoryConfig, observation_tokens: int) -> Limits:
    observation = thresholds.resolve_observation_thresholds(config, observation_tokens)
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
    # chunks left when the observation starts reach into the newest turn: the observation covers what
    # precedes it, so those chunks would observe the same messages again and are dropped
    discarded_chunks: tuple[str, ...] = ()


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
    reader_thread: str | None = None,
    caller_provider_options: Mapping[str, Any] | None = None,
) -> Decision | None:
    """The next step for this record.

    ``append`` and ``work`` (after a background result) may activate and request background work;
    ``read`` may in addition ask for synchronous observation and reflection (blockAfter); ``idle`` is the
    end of a turn or a sweep, where ``bufferOnIdle`` and idle TTLs apply. ``reader_thread`` is the thread
    a read is for, whose newest user message stays raw as well as the record's (resource scope).
    ``caller_provider_options`` are the caller's own provider options (``openai.promptCacheRetention``),
    which an ``"auto"`` idle TTL follows. With ``enabled: false`` nothing is ever decided.
    """
    if not config.enabled:
        return None
    limits = resolve_limits(config, state)
    protected = protected_from_seq(state, reader_thread)
    return (
        _activation(state, config, limits, now, caller_model, protected, caller_provider_options)
        or _observation_work(state, config, limits, mode, protected)
        or _reflection(state, config, limits, mode, now, caller_model, caller_provider_options)
    )


def protected_from_seq(state: RecordState, reader_thread: str | None = None) -> int | None:
    """The seq of the oldest message no observation may take: the newest user message of the window (and,
    for a read in resource scope, the reader's own newest one, if older). Everything from it on stays raw,
    because the context *is* what the agent sends: observing the turn's own question would have the model
    answer a question it never saw verbatim (docs/semantics.md, The newest turn stays raw)."""
    newest: int | None = None
    for message in reversed(state.window):
        if message.kind != "message" or message.role != "user":
            continue
        if newest is None:
            newest = message.seq
        if reader_thread is None or message.thread_id in (reader_thread, None):
            return message.seq
    return newest


def protected_tokens(state: RecordState, protected: int | None) -> int:
    """Tokens of the window from the protected message on."""
    if protected is None:
        return 0
    return sum(m.tokens for m in state.window if m.seq >= protected)


def activatable_chunks(state: RecordState, protected: int | None) -> int:
    """How many leading chunks lie wholly before the protected message (all of them when nothing is)."""
    if protected is None:
        return len(state.chunks)
    count = 0
    for chunk in state.chunks:
        if chunk.to_seq >= protected:
            break
        count += 1
    return count


def activation_count(state: RecordState, limits: Limits, protected: int | None) -> int:
    """How many chunks an activation would consume now (0: none can be)."""
    available = state.chunks[: activatable_chunks(state, protected)]
    if not available:
        return 0
    return thresholds.select_chunks_to_activate(
        [c.message_tokens for c in available],
        pending_tokens=state.pending_tokens,
        threshold=limits.message_threshold,
        retention_floor=limits.retention_floor,
        block_after=limits.block_after,
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
    state: RecordState,
    config: MemoryConfig,
    limits: Limits,
    now: datetime,
    caller_model: str | None,
    protected: int | None,
    caller_provider_options: Mapping[str, Any] | None = None,
) -> ActivateChunks | None:
    if not state.chunks or state.sync_in_flight is not None:
        return None
    count = activation_count(state, limits, protected)
    if count == 0:
        return None

    # precedence: provider change, then TTL, then threshold (docs/semantics.md, Activation)
    if (
        thresholds.resolve_activate_on_provider_change(config)
        and caller_model
        and state.last_assistant_model
        and not same_model(caller_model, state.last_assistant_model)
    ):
        return ActivateChunks(
            count=count,
            triggered_by="provider_change",
            previous_model=state.last_assistant_model,
            current_model=caller_model,
        )
    ttl_ms = thresholds.resolve_idle_ttl_ms(
        config, caller_model or state.last_assistant_model, caller_provider_options=caller_provider_options
    )
    if ttl_ms is not None and state.last_assistant_at is not None:
        idle_ms = int((now - parse_time(state.last_assistant_at)).total_seconds() * 1000)
        if idle_ms >= ttl_ms:
            return ActivateChunks(
                count=count,
                triggered_by="ttl",
                last_activity_at=state.last_assistant_at,
                ttl_expired_ms=idle_ms,
            )
    if state.pending_tokens >= limits.message_threshold:
        return ActivateChunks(count=count, triggered_by="threshold")
    return None


def _observation_work(
    state: RecordState, config: MemoryConfig, limits: Limits, mode: Mode, protected: int | None
) -> RequestObservationBuffer | ObserveSynchronously | None:
    if state.sync_in_flight is not None:
        return None
    p = state.pending_tokens
    if mode == "read" and _must_observe_now(state, limits):
        trigger: Literal["threshold", "block_after"] = "block_after" if limits.buffering else "threshold"
        return sync_observation(state, limits, trigger, protected)
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


def sync_observation(
    state: RecordState, limits: Limits, trigger: Literal["threshold", "block_after"], protected: int | None
) -> ObserveSynchronously | None:
    """Observe everything unobserved before the protected message except the newest messages that fit in
    the retention floor; ``None`` when nothing before it can be observed.

    Chunks that could be activated are activated before this is asked (activation precedes it in
    ``next_decision``), so the range starts right after the cursor, and any chunk still buffered reaches
    into the protected turn. Keeping a raw tail leaves the newest turn verbatim for the agent.
    """
    window = state.window
    end = len(window)
    if protected is not None:
        end = next(i for i, m in enumerate(window) if m.seq == protected)
    kept = sum(m.tokens for m in window[end:])
    cut = end
    while cut > 0 and kept + window[cut - 1].tokens <= limits.retention_floor:
        cut -= 1
        kept += window[cut].tokens
    # the window should end up below the threshold whatever the floor says, as far as the protected turn
    # allows
    while cut < end and kept + TOKENS_PER_CONVERSATION >= limits.message_threshold:
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
        discarded_chunks=tuple(c.cycle_id for c in state.chunks),
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
    state: RecordState,
    config: MemoryConfig,
    limits: Limits,
    mode: Mode,
    now: datetime,
    caller_model: str | None,
    caller_provider_options: Mapping[str, Any] | None = None,
) -> RequestReflection | ActivateBufferedReflection | None:
    """Reflection with a bounded number of Reflector calls (docs/semantics.md, Reflection, Bounded model
    spend): a background reflection is asked for only when observations were added since the current
    generation began and the log is below reflection.blockAfter, so a reflection whose result is still
    large never asks for the next one; at blockAfter a read reflects the whole log with the ladder."""
    o = state.observation_tokens
    r = limits.observation_threshold
    if o == 0 or state.sync_in_flight is not None:
        return None
    if state.buffered_reflection is not None:
        if o >= r:
            return ActivateBufferedReflection(triggered_by="threshold")
        early = _early_reflection_trigger(state, config, limits, now, caller_model, caller_provider_options)
        if early is not None:
            return ActivateBufferedReflection(triggered_by=early)
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
        and (limits.reflection_block_after is None or o < limits.reflection_block_after)
        and state.has_fresh_observations
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


def _early_reflection_trigger(
    state: RecordState,
    config: MemoryConfig,
    limits: Limits,
    now: datetime,
    caller_model: str | None,
    caller_provider_options: Mapping[str, Any] | None = None,
) -> Literal["ttl", "provider_change"] | None:
    """``reflection.activateOnProviderChange`` / ``reflection.activateAfterIdle``: activate a buffered
    reflection below the threshold, unless that would be premature (the reference's guard): the lines
    written after its slice are fewer tokens than the reflection itself, or the result would be smaller
    than 0.75·R·(1 − bufferActivation)."""
    buffered = state.buffered_reflection
    if buffered is None:
        return None
    trigger: Literal["ttl", "provider_change"] | None = None
    if (
        thresholds.resolve_activate_on_provider_change(config, "reflection")
        and caller_model
        and state.last_assistant_model
        and not same_model(caller_model, state.last_assistant_model)
    ):
        trigger = "provider_change"
    else:
        ttl_ms = thresholds.resolve_idle_ttl_ms(
            config, caller_model or state.last_assistant_model, "reflection", caller_provider_options
        )
        last = state.last_assistant_at
        idle_ms = None if last is None else (now - parse_time(last)).total_seconds() * 1000
        if ttl_ms is not None and idle_ms is not None and idle_ms >= ttl_ms:
            trigger = "ttl"
    if trigger is None:
        return None
    tail_tokens = max(0, state.observation_tokens - buffered.input_tokens)
    combined = buffered.tokens + tail_tokens
    floor = round(0.75 * limits.observation_threshold * (1 - config.reflection.buffer_activation))
    if tail_tokens < buffered.tokens or combined < floor:
        return None
    return trigger


def _must_reflect_now(state: RecordState, limits: Limits) -> bool:
    o = state.observation_tokens
    if state.reflection_suppressed_at == o:
        return False  # an identical over-threshold retry would produce the same result
    if limits.reflection_block_after is None:
        return o >= limits.observation_threshold
    return o >= limits.reflection_block_after and state.buffered_reflection is None
