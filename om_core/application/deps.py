"""The adapters a use case runs against: the API, the workers and the CLI each build one (see bootstrap)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from om_core.application.ports import (
    ApiKeys,
    EventStore,
    Leases,
    MessageQueries,
    ModelGateway,
    Outbox,
    RecordProjection,
    ScanLocks,
    VectorIndex,
    WorkDispatcher,
)
from om_core.application.state_cache import StateCache


def utc_now() -> datetime:
    return datetime.now(UTC)


def _nothing_to_close() -> None:
    return None


@dataclass
class Deps:
    """The adapters a use case runs against. One per runtime, built by its composition root
    (``om_core/bootstrap.py`` inline, ``om_workers/bootstrap.py`` worker, ``om_api/bootstrap.py`` API).

    The store's roles are separate attributes, so a use case names the one it uses (``deps.records`` to
    read a record row, ``deps.outbox`` to mark tasks published, ``deps.leases`` to hold work in flight); in
    production one SQL adapter plays them all. ``close`` releases what the runtime opened for them (the
    database pool).
    """

    store: EventStore
    records: RecordProjection
    messages: MessageQueries
    outbox: Outbox
    index: VectorIndex
    locks: ScanLocks
    keys: ApiKeys
    leases: Leases
    models: ModelGateway
    dispatcher: WorkDispatcher
    # the deployment's default profile, and its named ones (om_core/application/profiles.py)
    profile: Mapping[str, Any] = field(default_factory=dict)
    profiles: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    clock: Callable[[], datetime] = utc_now
    max_message_bytes: int = 1_000_000
    sync_wait_seconds: float = 10.0
    # how long a lease on work in flight lasts unless its holder renews it (application/leases.py)
    lease_seconds: float = 30.0
    states: StateCache = field(default_factory=StateCache)
    # where secrets named by the profile (a webhook's secretEnv) are read: the process's environment
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    close: Callable[[], None] = _nothing_to_close
