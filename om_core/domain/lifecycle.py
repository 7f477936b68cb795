"""The names of the lifecycle events a webhook can subscribe to (om_core/domain/webhooks.py maps the data
parts to them); apart, so that the configuration can validate a webhook's ``events`` importing nothing."""

from __future__ import annotations

OBSERVATION_EVENTS = ("observation.start", "observation.end", "observation.failed")
REFLECTION_EVENTS = ("reflection.start", "reflection.end", "reflection.failed")
BUFFERING_EVENTS = ("buffering.start", "buffering.end", "buffering.failed")
LIFECYCLE_EVENTS: tuple[str, ...] = (
    *OBSERVATION_EVENTS,
    *REFLECTION_EVENTS,
    *BUFFERING_EVENTS,
    "activation",
    "extraction",
    "thread.update",
)
