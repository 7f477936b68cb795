"""The adapters a use case runs against: the API, the workers and the CLI each build one (see bootstrap)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from om_core.application.ports import EventStore, ModelGateway, WorkDispatcher
from om_core.application.state_cache import StateCache


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Deps:
    """The adapters a use case runs against. One per runtime, built by om_core.bootstrap."""

    store: EventStore
    models: ModelGateway
    dispatcher: WorkDispatcher
    profile: Mapping[str, Any] = field(default_factory=dict)
    clock: Callable[[], datetime] = utc_now
    max_message_bytes: int = 1_000_000
    sync_wait_seconds: float = 10.0
    states: StateCache = field(default_factory=StateCache)
