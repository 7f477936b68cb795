"""What a committed outcome event says a cycle's model calls cost: the one source of the usage on the data
parts, of the usage metrics and of the webhooks' payloads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from om_core.domain.events import UNRECORDED_USAGE, Usage

Operation = Literal["observation", "reflection"]
Outcome = Literal["completed", "failed", "stale"]

# every event that ends an Observer or Reflector cycle with its usage, by stored event type
_OUTCOMES: dict[str, tuple[Operation, Outcome]] = {
    "ObservationBufferCompleted": ("observation", "completed"),
    "SyncObservationCompleted": ("observation", "completed"),
    "ObservationBufferFailed": ("observation", "failed"),
    "SyncObservationFailed": ("observation", "failed"),
    "ReflectionBuffered": ("reflection", "completed"),
    "ReflectionCompleted": ("reflection", "completed"),
    "ReflectionFailed": ("reflection", "failed"),
    # an answer that came too late is discarded, but its calls were made
    "ObservationBufferStale": ("observation", "stale"),
    "SyncObservationStale": ("observation", "stale"),
    "ReflectionStale": ("reflection", "stale"),
}


@dataclass(frozen=True, slots=True)
class CycleUsage:
    operation: Operation
    outcome: Outcome
    usage: Usage


def cycle_usage(event_type: str, data: dict[str, Any]) -> CycleUsage | None:
    """The usage an outcome event records (from its stored JSON), None for any other event and for a stale
    record of a cycle no model was called for.

    Reads only the ``usage`` field, so counting a commit's usage never decodes the observations it holds.
    A failure stored before failures recorded usage has none: ``UNRECORDED_USAGE``.
    """
    kind = _OUTCOMES.get(event_type)
    if kind is None:
        return None
    raw = data.get("usage")
    if raw is None and kind[1] == "stale":
        return None  # no model was called for it
    usage = Usage.model_validate(raw) if raw is not None else UNRECORDED_USAGE
    return CycleUsage(kind[0], kind[1], usage)
