"""Upcasters: how stored events of an older schema version are read as the current one.

Stored events are never rewritten. Each step turns the data of ``(event_type, schema_version)`` into the
data of ``schema_version + 1``; steps are chained on read, so every caller sees the latest version of every
event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

JSONDict = dict[str, Any]
UpcastStep = Callable[[JSONDict], JSONDict]


class UpcasterError(ValueError):
    """The registry is inconsistent (a step registered twice)."""


class Upcasters:
    def __init__(self) -> None:
        self._steps: dict[tuple[str, int], UpcastStep] = {}

    def register(self, event_type: str, from_version: int, step: UpcastStep) -> None:
        """Make ``step`` turn ``event_type`` data of ``from_version`` into ``from_version + 1``."""
        if from_version < 1:
            raise UpcasterError(f"schema versions start at 1, got {from_version} for {event_type}")
        key = (event_type, from_version)
        if key in self._steps:
            raise UpcasterError(f"an upcaster for {event_type} v{from_version} is already registered")
        self._steps[key] = step

    def step(self, event_type: str, from_version: int) -> Callable[[UpcastStep], UpcastStep]:
        """Decorator form of ``register``."""

        def decorate(step: UpcastStep) -> UpcastStep:
            self.register(event_type, from_version, step)
            return step

        return decorate

    def upcast(self, event_type: str, schema_version: int, data: JSONDict) -> tuple[int, JSONDict]:
        """The data brought up to the newest version there are steps for, and that version.

        Steps receive their own copy of the data, so they may change it in place.
        """
        version = schema_version
        step = self._steps.get((event_type, version))
        if step is None:
            return version, data
        current = _copy(data)
        while step is not None:
            current = step(current)
            version += 1
            step = self._steps.get((event_type, version))
        return version, current


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
