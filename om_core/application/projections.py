"""Use cases over projections: rebuild and verify them from events; replay a stream to any version."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from om_core.application.configuration import record_config
from om_core.application.deps import utc_now
from om_core.application.ports import EventStore, RecordProjection
from om_core.application.profiles import is_record_stream
from om_core.application.repository import replay_state, snapshot_of
from om_core.application.streams import RecordNotFoundError, tenant_of
from om_core.domain.config import MemoryConfig
from om_core.domain.context import build_context
from om_core.domain.envelope import StateSnapshot, StoredSnapshot
from om_core.domain.state import RecordState


class VersionOutOfRangeError(LookupError):
    """A version past the stream's last event: there is no such point in its history."""

    def __init__(self, stream_id: str, requested: int, version: int) -> None:
        super().__init__(f"{stream_id} has no version {requested}: its history ends at version {version}")
        self.stream_id = stream_id
        self.requested = requested
        self.version = version


@dataclass
class RebuildReport:
    streams: int = 0
    events: int = 0
    rebuilt: int = 0
    identical: int = 0
    mismatched: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "streams": self.streams,
            "events": self.events,
            "rebuilt": self.rebuilt,
            "identical": self.identical,
            "mismatched": self.mismatched,
        }


def canonical(state_json: Mapping[str, Any]) -> str:
    return json.dumps(state_json, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def rebuild_projections(
    records: RecordProjection, store: EventStore, *, verify_only: bool = False, prefix: str = ""
) -> RebuildReport:
    """Fold every stream of ``store`` from its first event and compare with (or replace) its stored
    projection in ``records``.

    Verification compares canonical JSON, so equal means byte-identical once serialised the same way.
    """
    report = RebuildReport()
    for stream_id in store.iter_streams(prefix):
        if not is_record_stream(stream_id):
            continue  # a profile's stream has no record to fold
        report.streams += 1
        rebuilt = replay_state(store, stream_id)
        report.events += rebuilt.version
        stored = records.load_snapshot(stream_id)
        expected = snapshot_of(rebuilt, tenant_of(stream_id))
        same = (
            stored is not None
            and stored.version == rebuilt.version
            and stored.position == rebuilt.position
            and _row_as_written(stored) == _row_as_written(expected)
            # the window's messages are read back from the message projection: it must hold them all
            and [m.message_id for m in stored.window or ()]
            == [m.message_id for m in rebuilt.window if m.kind == "message"]
        )
        if same:
            report.identical += 1
            continue
        report.mismatched.append(stream_id)
        if not verify_only:
            records.replace_snapshot(stream_id, expected, rebuilt.version)
            report.rebuilt += 1
    return report


def _row_as_written(row: StoredSnapshot | StateSnapshot) -> str:
    """A record row in one canonical form, the log put back into the state wherever the row kept it."""
    state = row.state if isinstance(row.state, dict) else json.loads(str(row.state))
    if row.log is not None:
        state = {**state, "log": json.loads(row.log)}
    return canonical({"log": [], **state})


def replay_context(
    store: EventStore,
    stream_id: str,
    *,
    to_version: int | None = None,
    profile: Mapping[str, Any] | None = None,
    config_for: Callable[[RecordState], MemoryConfig] | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The context window a fresh fold of the first ``to_version`` events gives, as JSON, under
    ``profile`` or, with ``config_for``, the configuration it gives the folded state (``config_of``: the
    record's own profile, as it was at that event).

    Raises RecordNotFoundError for a stream with no events, VersionOutOfRangeError past its last one.
    """
    state = replay_state(store, stream_id, to_version)
    if state.version == 0:
        raise RecordNotFoundError(stream_id)
    if to_version is not None and to_version > state.version:
        raise VersionOutOfRangeError(stream_id, to_version, state.version)
    config = config_for(state) if config_for is not None else record_config(profile or {}, state)
    window = build_context(state, config, now or utc_now())
    return {
        "stream_id": stream_id,
        "version": window.version,
        "system": window.system,
        "continuation": window.continuation,
        "messages": window.messages,
        "status": window.status,
    }
