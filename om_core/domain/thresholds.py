"""Threshold arithmetic over a ``MemoryConfig``: pure functions, no I/O.

Symbols follow docs/semantics.md (Thresholds, Buffering, Activation): ``T`` message threshold, ``B``
resolved bufferTokens, ``A`` resolved blockAfter, ``P`` unobserved message tokens, ``R``
reflection.observationTokens, ``O`` observation tokens. The numeric resolvers take plain numbers so they can
be checked against worked scenarios of Mastra's arithmetic; the ``resolve_*_thresholds`` functions apply them
to a configuration.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from om_core.domain.config import (
    BufferTokens,
    IdleTTL,
    MemoryConfig,
    ModelByInputTokens,
    ModelSettings,
    ModelSpec,
    parse_activate_after_idle,
    round_half_up,
)

__all__ = [
    "DEFAULT_MODEL",
    "MAX_COMPRESSION_LEVEL",
    "ModelChoice",
    "ObservationThresholds",
    "ReflectionThresholds",
    "Role",
    "auto_idle_ttl_ms",
    "buffer_interval",
    "buffered_reflection_line_count",
    "compression_attempt_levels",
    "compression_start_level",
    "message_threshold",
    "min_early_reflection_activation_tokens",
    "parse_activate_after_idle",
    "ratio_base_tokens",
    "reflection_compression_target",
    "reflection_slice_tokens",
    "resolve_activate_on_provider_change",
    "resolve_activation_ratio",
    "resolve_block_after",
    "resolve_buffer_tokens",
    "resolve_idle_ttl_ms",
    "resolve_model",
    "resolve_model_route",
    "resolve_model_settings",
    "resolve_observation_thresholds",
    "resolve_reflection_thresholds",
    "resolve_retention_floor",
    "select_chunks_to_activate",
    "should_request_buffer",
    "uses_default_model_selection",
    "validate_compression",
]

Role: TypeAlias = Literal["observer", "reflector"]
IdleScope: TypeAlias = Literal["observation", "reflection"]

DEFAULT_MODEL = "google/gemini-2.5-flash"
DEFAULT_MAX_OUTPUT_TOKENS = 100_000
DEFAULT_TEMPERATURE: Mapping[Role, float] = {"observer": 0.3, "reflector": 0.0}
# Past T − 1.1·B the buffer interval halves, so a chunk is likely ready when T is reached.
BUFFER_RAMP_FACTOR = 1.1
# Activation may overshoot the retention floor by this fraction of it, and must leave this much behind.
MAX_OVERSHOOT_OF_FLOOR = 0.95
MIN_REMAINING_TOKENS = 1_000
REFLECTION_COMPRESSION_RATIO = 0.75
MAX_COMPRESSION_LEVEL = 4
MAX_COMPRESSION_ATTEMPTS = 4

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
_OPENAI_SHORT_CACHE_MODELS = re.compile(r"^(gpt-4|gpt-5(-|$)|gpt-5\.[1-4](\D|$))")


# ------------------------------------------------------------------------------ numeric resolvers


def resolve_buffer_tokens(buffer_tokens: BufferTokens, threshold: int) -> int | None:
    """``B``: a ratio in (0,1) of ``threshold`` (rounded) or an absolute count; ``None`` when disabled."""
    if buffer_tokens is False:
        return None
    return round_half_up(buffer_tokens * threshold) if buffer_tokens < 1 else int(buffer_tokens)


def resolve_block_after(block_after: float | None, threshold: int) -> int | None:
    """``A``: a multiplier in [1,100) of ``threshold`` (rounded) or an absolute count; ``None`` when unset."""
    if block_after is None:
        return None
    return round_half_up(block_after * threshold) if block_after < 100 else int(block_after)


def resolve_activation_ratio(buffer_activation: float, threshold: int) -> float:
    """The fraction of ``threshold`` an activation removes; an absolute value (>= 1000) is the count to
    keep, so it converts to ``1 − keep/threshold`` clamped to [0, 1]."""
    if buffer_activation <= 1:
        return buffer_activation
    return min(1.0, max(0.0, 1 - buffer_activation / threshold))


def resolve_retention_floor(buffer_activation: float, threshold: int) -> int:
    """Tokens an activation aims to leave in the window: ``threshold × (1 − activation ratio)``."""
    return round_half_up(threshold * (1 - resolve_activation_ratio(buffer_activation, threshold)))


def ratio_base_tokens(config: MemoryConfig) -> int:
    """What ratio options resolve against: ``messageTokens``, or the whole range
    ``messageTokens + observationTokens`` with a shared budget."""
    base = config.observation.message_tokens
    return base + config.reflection.observation_tokens if config.share_token_budget else base


def message_threshold(config: MemoryConfig, current_observation_tokens: int) -> int:
    """``T``. With ``shareTokenBudget`` the room observations do not use goes to messages:
    ``max(messageTokens + observationTokens − current, messageTokens)``."""
    base = config.observation.message_tokens
    if not config.share_token_budget:
        return base
    return max(ratio_base_tokens(config) - current_observation_tokens, base)


@dataclass(frozen=True, slots=True)
class ObservationThresholds:
    """The observation budget in tokens. ``buffer_tokens``/``block_after`` are ``None`` without buffering."""

    message_tokens: int
    buffer_tokens: int | None
    block_after: int | None
    activation_ratio: float
    retention_floor: int


def resolve_observation_thresholds(
    config: MemoryConfig, current_observation_tokens: int
) -> ObservationThresholds:
    observation = config.observation
    threshold = message_threshold(config, current_observation_tokens)
    ratio_base = ratio_base_tokens(config)
    return ObservationThresholds(
        message_tokens=threshold,
        buffer_tokens=resolve_buffer_tokens(observation.buffer_tokens, ratio_base),
        block_after=resolve_block_after(observation.block_after, ratio_base),
        activation_ratio=resolve_activation_ratio(observation.buffer_activation, threshold),
        retention_floor=resolve_retention_floor(observation.buffer_activation, threshold),
    )


# ------------------------------------------------------------------------------------- buffering


def buffer_interval(buffer_tokens: int, threshold: int, pending_tokens: int) -> float:
    """Tokens between buffer runs: ``B``, halved once ``P >= T − 1.1·B``."""
    ramp_point = threshold - BUFFER_RAMP_FACTOR * buffer_tokens
    return buffer_tokens / 2 if pending_tokens >= ramp_point else float(buffer_tokens)


def should_request_buffer(
    pending_tokens: int,
    last_boundary_tokens: int,
    unbuffered_tokens: int,
    thresholds: ObservationThresholds,
) -> bool:
    """Request a background Observer run (docs/semantics.md, Buffering) when ``P`` has crossed a new
    multiple of the interval since ``last_boundary_tokens``, ``P < A`` (buffering goes on between ``T`` and
    ``A``), and at least ``B/2`` tokens are neither observed nor already in a chunk."""
    buffer_tokens, block_after = thresholds.buffer_tokens, thresholds.block_after
    if buffer_tokens is None or block_after is None or pending_tokens >= block_after:
        return False
    if unbuffered_tokens < buffer_tokens / 2:
        return False
    interval = buffer_interval(buffer_tokens, thresholds.message_tokens, pending_tokens)
    return math.floor(pending_tokens / interval) > math.floor(last_boundary_tokens / interval)


def select_chunks_to_activate(
    chunk_message_tokens: Sequence[int],
    pending_tokens: int,
    threshold: int,
    retention_floor: int,
    block_after: int | None,
) -> int:
    """How many chunks, from the oldest, an activation consumes (docs/semantics.md, Activation).

    The aim is to remove ``P − floor`` tokens: prefer the first prefix reaching that target if it
    overshoots by at most 0.95·floor, else the longest prefix below it, and always leave at least
    ``min(1000, floor)`` tokens. At or past ``blockAfter`` the reaching prefix wins regardless of overshoot.
    """
    if not chunk_message_tokens:
        return 0
    if not 0 <= retention_floor <= threshold:
        raise ValueError(f"retention floor {retention_floor} must lie within [0, threshold {threshold}]")
    target = max(0, pending_tokens - retention_floor)
    over: tuple[int, int] | None = None  # (chunk count, cumulative tokens) of the first prefix >= target
    under: tuple[int, int] | None = None  # the longest prefix still below target
    cumulative = 0
    for count, tokens in enumerate(chunk_message_tokens, start=1):
        cumulative += tokens
        if cumulative >= target:
            over = (count, cumulative)
            break
        if under is None or cumulative > under[1]:
            under = (count, cumulative)

    if over is None:
        # Even every chunk together stays below the target (and so leaves more than the floor).
        return len(chunk_message_tokens)
    min_remaining = min(MIN_REMAINING_TOKENS, retention_floor)
    over_count, over_tokens = over
    leaves_enough = pending_tokens - over_tokens >= min_remaining
    force_max = block_after is not None and pending_tokens >= block_after
    if leaves_enough and (force_max or over_tokens - target <= MAX_OVERSHOOT_OF_FLOOR * retention_floor):
        return over_count
    if under is not None and pending_tokens - under[1] >= min_remaining:
        return under[0]
    return over_count


# ------------------------------------------------------------------------------------- reflection


@dataclass(frozen=True, slots=True)
class ReflectionThresholds:
    """Reflection points in observation tokens (docs/semantics.md, Reflection). Without buffering only
    ``R`` matters."""

    observation_tokens: int
    buffer_start_tokens: int | None
    block_after: int | None

    @property
    def sync_tokens(self) -> int:
        """With no buffered reflection to activate, ``O`` at or above this reflects synchronously."""
        return self.block_after if self.block_after is not None else self.observation_tokens


def resolve_reflection_thresholds(config: MemoryConfig) -> ReflectionThresholds:
    reflection = config.reflection
    threshold = reflection.observation_tokens
    buffering = config.buffering_enabled
    return ReflectionThresholds(
        observation_tokens=threshold,
        buffer_start_tokens=round_half_up(threshold * reflection.buffer_activation) if buffering else None,
        block_after=resolve_block_after(reflection.block_after, threshold) if buffering else None,
    )


def buffered_reflection_line_count(
    total_tokens: int, line_count: int, observation_tokens: int, buffer_activation: float
) -> int:
    """How many of the oldest log lines a background reflection condenses: as many average-sized lines
    as fit in ``R × bufferActivation`` tokens."""
    if line_count <= 0 or total_tokens <= 0:
        return max(line_count, 0)
    average = total_tokens / line_count
    return min(math.floor(observation_tokens * buffer_activation / average), line_count)


def reflection_slice_tokens(total_tokens: int, line_count: int, lines_to_reflect: int) -> int:
    """Estimated tokens of the first ``lines_to_reflect`` lines, at the log's average tokens per line."""
    if line_count <= 0:
        return 0
    return round_half_up(total_tokens / line_count * lines_to_reflect)


def reflection_compression_target(slice_tokens: int) -> int:
    """A buffered reflection must condense its slice below 75% of the slice's size."""
    return round_half_up(REFLECTION_COMPRESSION_RATIO * slice_tokens)


def min_early_reflection_activation_tokens(observation_tokens: int, buffer_activation: float) -> int:
    """Below this many tokens, a buffered reflection activated early (idle TTL, provider change) would
    shrink the log too far, so the activation is suppressed."""
    return round_half_up(REFLECTION_COMPRESSION_RATIO * observation_tokens * (1 - buffer_activation))


def compression_start_level(model_id: str) -> int:
    """gemini-2.5-flash needs firmer guidance from the first attempt."""
    return 2 if "gemini-2.5-flash" in model_id.lower() else 1


def compression_attempt_levels(start_level: int) -> tuple[int, ...]:
    """The guidance levels of successive attempts: at most four, never past level 4."""
    last = min(MAX_COMPRESSION_LEVEL, start_level + MAX_COMPRESSION_ATTEMPTS - 1)
    return tuple(range(start_level, last + 1))


def validate_compression(tokens: int, target: int) -> bool:
    """A reflection succeeds only strictly below its target."""
    return tokens < target


# ------------------------------------------------------------------------------- idle activation


def auto_idle_ttl_ms(model: str, provider_options: Mapping[str, Any] | None = None) -> int:
    """The ``"auto"`` idle TTL: how long the caller's provider keeps a prompt cache warm
    (docs/configuration.md, activateAfterIdle).

    ``model`` is ``provider/model-id``; the provider is matched by substring, lowercased. A bare id
    without a provider counts as unknown.
    """
    provider, _, model_id = model.lower().partition("/")
    if not model_id:
        return 5 * MINUTE_MS
    if "openai" in provider:
        return _openai_cache_ttl_ms(model_id, provider_options or {})
    if "google" in provider or "gemini" in provider or "vertex" in provider:
        return 24 * HOUR_MS
    if "deepseek" in provider:
        return HOUR_MS
    if "groq" in provider:
        return 2 * HOUR_MS
    return 5 * MINUTE_MS


def _openai_cache_ttl_ms(model_id: str, provider_options: Mapping[str, Any]) -> int:
    openai_options = provider_options.get("openai")
    retention = (
        openai_options.get("promptCacheRetention", openai_options.get("prompt_cache_retention"))
        if isinstance(openai_options, Mapping)
        else None
    )
    if retention == "24h":
        return HOUR_MS
    if retention == "in_memory":
        return 5 * MINUTE_MS
    return 5 * MINUTE_MS if _OPENAI_SHORT_CACHE_MODELS.match(model_id) else HOUR_MS


def resolve_idle_ttl_ms(
    config: MemoryConfig,
    caller_model: str | None,
    scope: IdleScope = "observation",
    caller_provider_options: Mapping[str, Any] | None = None,
) -> int | None:
    """The idle TTL in ms after which buffered work activates, or ``None`` when idle activation is off.

    Observation uses ``observation.activateAfterIdle`` when set (``false`` disables) and the top-level
    option otherwise; reflection uses only ``reflection.activateAfterIdle``. ``"auto"`` follows the
    caller's model (unknown when not given).
    """
    ttl: IdleTTL | None
    if scope == "reflection":
        ttl = config.reflection.activate_after_idle
    else:
        override = config.observation.activate_after_idle
        ttl = config.activate_after_idle if override is None else (override or None)
    if ttl == "auto":
        return auto_idle_ttl_ms(caller_model or "", caller_provider_options)
    return ttl


def resolve_activate_on_provider_change(config: MemoryConfig, scope: IdleScope = "observation") -> bool:
    if scope == "reflection":
        return config.reflection.activate_on_provider_change
    override = config.observation.activate_on_provider_change
    return config.activate_on_provider_change if override is None else override


# ----------------------------------------------------------------------------------------- models


def _model_spec(config: MemoryConfig, role: Role) -> ModelSpec | None:
    own, other = (
        (config.observation.model, config.reflection.model)
        if role == "observer"
        else (config.reflection.model, config.observation.model)
    )
    for spec in (config.model, own, other):
        if spec is not None:
            return spec
    return None


def uses_default_model_selection(config: MemoryConfig, role: Role) -> bool:
    """No explicit model, ``"default"``, or a ModelByInputTokens selector (docs/configuration.md,
    ModelByInputTokens)."""
    spec = _model_spec(config, role)
    return spec is None or spec == "default" or isinstance(spec, ModelByInputTokens)


def resolve_model(config: MemoryConfig, role: Role, input_tokens: int) -> str:
    """The model id for an Observer or Reflector call with ``input_tokens`` of input.

    Fallback: top-level ``model`` → the role's own model → the other role's model → the default.
    A ModelByInputTokens selector picks the smallest ``upTo`` bound >= ``input_tokens``; an input over
    every bound goes to the largest tier (Mastra throws there, which would fail the cycle on every retry
    with the same input, and the largest tier's model is the one meant for the biggest inputs).
    """
    return resolve_model_route(config, role, input_tokens)[0].model


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """A model to call, and its bound on retries of transient errors (``None``: ``modelRetry.maxRetries``)."""

    model: str
    max_retries: int | None = None


def resolve_model_route(config: MemoryConfig, role: Role, input_tokens: int) -> tuple[ModelChoice, ...]:
    """The models to try in turn for a call (``resolve_model`` is the first): one, or the enabled entries
    of a model list with their own retry bounds, each tried once the one before it has failed."""
    spec = _model_spec(config, role)
    if spec is None:
        return (ModelChoice(DEFAULT_MODEL),)
    if isinstance(spec, tuple):
        return tuple(
            ModelChoice(DEFAULT_MODEL if entry.model == "default" else entry.model, entry.max_retries)
            for entry in spec
            if entry.enabled
        )
    if isinstance(spec, ModelByInputTokens):
        # the tiers are sorted by bound, so the first that fits is the smallest
        fitting = [model for bound, model in spec.up_to.items() if bound >= input_tokens]
        spec = fitting[0] if fitting else spec.up_to[max(spec.up_to)]
    return (ModelChoice(DEFAULT_MODEL if spec == "default" else spec),)


def resolve_model_settings(config: MemoryConfig, role: Role) -> ModelSettings:
    """The role's ``modelSettings`` over its defaults: temperature 0.3 (observer) / 0 (reflector), and
    ``maxOutputTokens`` 100,000 only when the default model selection is in use."""
    settings = config.observation.model_settings if role == "observer" else config.reflection.model_settings
    defaults: dict[str, Any] = {}
    if settings.temperature is None:
        defaults["temperature"] = DEFAULT_TEMPERATURE[role]
    if settings.max_output_tokens is None and uses_default_model_selection(config, role):
        defaults["max_output_tokens"] = DEFAULT_MAX_OUTPUT_TOKENS
    return settings.model_copy(update=defaults)
