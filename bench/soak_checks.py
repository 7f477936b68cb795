"""The soak's verdicts: what must hold once a soaked system has settled, each as a count of violations.

Every check reads the settled database (or the processes' logs) and adds to a ``Findings``: a count per
kind of violation and the first few examples of each, so a failing run says what broke and where. The
checks fold streams with the domain's own ``evolve`` and pair start parts with ``parts.cycle_closure``:
they hold the system to the rules its projections and live parts are built by, trusting no stored
projection.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from om_core.adapters.store.schema import events, indexed_groups, messages, outbox, records
from om_core.application.configuration import record_config
from om_core.application.ports import EventStore
from om_core.domain import parts
from om_core.domain.envelope import RecordedEvent
from om_core.domain.events import ChunksActivated, DomainEvent, SyncObservationCompleted, from_recorded
from om_core.domain.state import RecordState, SyncInFlight, evolve, initial_state

EXAMPLES = 5

VIOLATION_KINDS = (
    "verify_mismatched",
    "verify_crashed",
    "stream_does_not_fold",
    "erased_residue",
    "message_lost",
    "message_appended_twice",
    "message_unobserved",
    "message_observed_twice",
    "unclosed_start",
    "cycle_closed_wrongly",
    "task_exception",
    "worker_crashed",
    "http_500",
    "unsettled",
)

# events that open a cycle: every other event naming a cycle must name one opened before it in its lineage
_OPENS_CYCLE = frozenset({"ObservationBufferRequested", "SyncObservationStarted", "ReflectionRequested"})


@dataclass
class Findings:
    """Counts by kind; per kind a breakdown by group (a table, a task, a cycle kind) and the first few
    examples of each group, so one common case cannot hide the others."""

    counts: Counter[str] = field(default_factory=Counter)
    groups: dict[str, Counter[str]] = field(default_factory=dict)
    examples: dict[str, list[Any]] = field(default_factory=dict)
    _shown: Counter[tuple[str, str]] = field(default_factory=Counter)

    def add(self, kind: str, example: Any, *, group: str = "") -> None:
        self.counts[kind] += 1
        if group:
            self.groups.setdefault(kind, Counter())[group] += 1
        if self._shown[kind, group] < EXAMPLES and len(self.examples.get(kind, [])) < 3 * EXAMPLES:
            self._shown[kind, group] += 1
            self.examples.setdefault(kind, []).append(example)

    def violations(self) -> dict[str, int]:
        return {kind: self.counts[kind] for kind in VIOLATION_KINDS}

    def breakdown(self) -> dict[str, dict[str, int]]:
        return {kind: dict(groups.most_common()) for kind, groups in self.groups.items()}


@dataclass
class LiveThread:
    """A thread that exists at the end, with the ids of its current lineage's messages that got a 2xx."""

    thread_id: str
    stream_id: str
    accepted: set[str]


@dataclass
class ErasedThread:
    """A thread erased by a DELETE that answered 204 at ``erased_at``; ``recreated_ids`` are the ids sent to
    it afterwards (empty when it was not re-created)."""

    thread_id: str
    stream_id: str
    erased_at: datetime
    recreated_ids: set[str]


# --- every stream folds to its stored state ---------------------------------------------------------------


def verify_projections(database_url: str, env: Mapping[str, str], findings: Findings) -> dict[str, Any]:
    """``om projections rebuild --verify`` as an operator runs it: 0 mismatched, exit 0, no traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "om_api.cli", "projections", "rebuild", "--verify"],
        env={**env, "OM_DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report: dict[str, Any] = {}
    with contextlib.suppress(json.JSONDecodeError):
        report = json.loads(done.stdout)
    mismatched = list(report.get("mismatched", []))
    for stream_id in mismatched:
        findings.add("verify_mismatched", stream_id)
    crashed = "Traceback" in done.stderr or not report or (done.returncode != 0 and not mismatched)
    if crashed:
        findings.add(
            "verify_crashed", {"exit": done.returncode, "stderr_tail": done.stderr.strip().splitlines()[-3:]}
        )
    return {"exit": done.returncode, **{k: v for k, v in report.items() if k != "mismatched"}}


# --- live threads: messages raw or observed once, every start closed ---------------------------------------


def check_live_threads(
    store: EventStore, profile: Mapping[str, Any], threads: Iterable[LiveThread], findings: Findings
) -> int:
    """Fold each live thread's stream; returns the number of events read."""
    total = 0
    for thread in threads:
        recorded = store.read_stream(thread.stream_id)
        total += len(recorded)
        folded = _fold(thread.stream_id, recorded, findings)
        if folded is None:
            continue
        state, stream_events, observed_by, appended = folded
        _check_messages(thread, state, observed_by, appended, findings)
        _check_starts_closed(thread.stream_id, stream_events, state, profile, findings)
    return total


def _fold(
    stream_id: str, recorded: Sequence[RecordedEvent], findings: Findings
) -> tuple[RecordState, list[DomainEvent], Counter[str], Counter[str]] | None:
    """The final state, the decoded events, how many applied observations cover each message id and how
    many times each message id was appended; None (a violation) when the stream does not fold."""
    state = initial_state(stream_id)
    decoded: list[DomainEvent] = []
    observed_by: Counter[str] = Counter()
    appended: Counter[str] = Counter()
    for record in recorded:
        try:
            event = from_recorded(record)
        except Exception as error:
            findings.add("stream_does_not_fold", _unfolded(stream_id, record, error))
            return None
        decoded.append(event)
        if isinstance(event, ChunksActivated):
            for chunk in state.chunks[: len(event.cycle_ids)]:
                observed_by.update(chunk.message_ids)
        elif (
            isinstance(event, SyncObservationCompleted)
            and state.in_flight(event.cycle_id, SyncInFlight) is not None
            and event.observations.strip()
        ):
            observed_by.update(event.message_ids)
        elif record.event_type == "MessageAppended":
            appended[str(record.data["message_id"])] += 1
        try:
            # the state is this loop's own: evolved in place, not copied per event
            state = evolve(state, [event], version=record.stream_version)
        except Exception as error:
            findings.add("stream_does_not_fold", _unfolded(stream_id, record, error))
            return None
    return state, decoded, observed_by, appended


def _unfolded(stream_id: str, record: RecordedEvent, error: Exception) -> dict[str, Any]:
    return {
        "stream": stream_id,
        "version": record.stream_version,
        "type": record.event_type,
        "error": f"{type(error).__name__}: {error}",
    }


def _check_messages(
    thread: LiveThread,
    state: RecordState,
    observed_by: Counter[str],
    appended: Counter[str],
    findings: Findings,
) -> None:
    raw = {m.message_id for m in state.window}
    for message_id in sorted(thread.accepted):
        where = {"stream": thread.stream_id, "message_id": message_id}
        if appended[message_id] == 0:
            findings.add("message_lost", where)
            continue
        if appended[message_id] > 1:
            findings.add("message_appended_twice", {**where, "times": appended[message_id]})
        if message_id in raw:
            continue
        if observed_by[message_id] == 0:
            findings.add("message_unobserved", {**where, "cursor": state.observed_seq})
        elif observed_by[message_id] > 1:
            findings.add("message_observed_twice", {**where, "times": observed_by[message_id]})


def _check_starts_closed(
    stream_id: str,
    stream_events: Sequence[DomainEvent],
    state: RecordState,
    profile: Mapping[str, Any],
    findings: Findings,
) -> None:
    """Each ``*-start`` part of the stream has exactly one ``-end`` or ``-failed`` part of its cycleId."""
    closure = parts.cycle_closure(stream_events, record_config(profile, state))
    for cycle_id in closure.unclosed:
        findings.add(
            "unclosed_start", {"stream": stream_id, "cycle_id": cycle_id}, group=_cycle_kind(cycle_id)
        )
    wrongly = {
        "closed_twice": closure.closed_twice,
        "started_twice": closure.started_twice,
        "closed_unstarted": closure.closed_unstarted,
    }
    for how, cycle_ids in wrongly.items():
        for cycle_id in cycle_ids:
            findings.add(
                "cycle_closed_wrongly", {"stream": stream_id, "cycle_id": cycle_id, "how": how}, group=how
            )


def _cycle_kind(cycle_id: str) -> str:
    """``buffer-obs``, ``sync-obs``, ``reflect-buf`` or ``reflect``: what the cycle id says it was."""
    return cycle_id.rsplit("-", 1)[0]


# --- erased threads: nothing of the old lineage anywhere ---------------------------------------------------


def check_erased_threads(engine: sa.Engine, threads: Iterable[ErasedThread], findings: Findings) -> None:
    """After a DELETE answered, no row of the erased conversation may exist or come back. A re-created
    thread is a new lineage: every event of it recorded after the DELETE answered, every message one sent
    after it, every cycle it names opened inside it."""
    with engine.connect() as conn:
        for thread in threads:
            _check_erased(conn, thread, findings)


def _check_erased(conn: sa.Connection, thread: ErasedThread, findings: Findings) -> None:
    sid = thread.stream_id
    new_ids = thread.recreated_ids

    def residue(table: str, what: Any) -> None:
        findings.add("erased_residue", {"stream": sid, "table": table, **what}, group=table)

    opened: set[str] = set()
    for row in conn.execute(
        sa.select(events.c.stream_version, events.c.event_type, events.c.data, events.c.recorded_at)
        .where(events.c.stream_id == sid)
        .order_by(events.c.stream_version)
    ):
        event = {
            "version": row.stream_version,
            "type": row.event_type,
            "recorded_at": row.recorded_at.isoformat(),
        }
        data = row.data or {}
        if row.recorded_at <= thread.erased_at:
            residue("om_events", {**event, "why": "recorded before the DELETE answered"})
            continue
        if row.event_type == "MessageAppended" and data.get("message_id") not in new_ids:
            residue("om_events", {**event, "message_id": data.get("message_id"), "why": "an old message"})
            continue
        named = [data["cycle_id"]] if isinstance(data.get("cycle_id"), str) else []
        named += [c for c in data.get("cycle_ids", []) if isinstance(c, str)]
        if row.event_type in _OPENS_CYCLE:
            opened.update(named)
        foreign = [c for c in named if c not in opened]
        if foreign:
            residue("om_events", {**event, "cycle_ids": foreign, "why": "a cycle of the old lineage"})
    if not new_ids:
        for row in conn.execute(sa.select(records.c.version).where(records.c.stream_id == sid)):
            residue("om_records", {"version": row.version})
    for row in conn.execute(sa.select(messages.c.message_id).where(messages.c.stream_id == sid)):
        if row.message_id not in new_ids:
            residue("om_messages", {"message_id": row.message_id})
    for row in conn.execute(sa.select(outbox.c.key, outbox.c.payload).where(outbox.c.stream_id == sid)):
        if (row.payload or {}).get("cycle_id") not in opened:
            residue("om_outbox", {"key": row.key})
    for row in conn.execute(
        sa.select(indexed_groups.c.group_id, indexed_groups.c.range_start).where(
            indexed_groups.c.stream_id == sid
        )
    ):
        if row.range_start not in new_ids:
            residue("om_indexed_groups", {"group_id": row.group_id, "range_start": row.range_start})


# --- logs -------------------------------------------------------------------------------------------------

# a Celery log record starts with "[2026-01-01 12:00:00,000: LEVEL/Process] "
_RECORD = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+: (\w+)/([^\]]+)\] ", re.MULTILINE)
_OUTCOME = re.compile(r"(om\.\w+) \S+ \S+: (\w+)$", re.MULTILINE)
_TASK_RAISED = re.compile(r"Task ([\w.]+)\[[^\]]*\] raised unexpected: (\w+)")
# the main process of a worker (or beat) that lost its broker logs the reconnect, the gossip it could not
# restart, the ack it could not send (the message is delivered again) or the tick it could not send, with
# the connection error's traceback: the outage the soak caused, not a task that failed
_BROKER_LOST = (
    "Connection to broker lost",
    "consumer: Cannot connect to",
    "Error on restarting Gossip",
    "Couldn't ack",
    "Couldn't apply scheduled task",
)
# a worker process that dies logs why, then tracebacks of its shutdown: counted as the crash it is (the soak's
# supervisor sees the exit), not as task exceptions
_CRASH = ("Unrecoverable error", "Error on stopping")


def scan_logs(paths: Iterable[Path], findings: Findings) -> dict[str, Any]:
    """Unexpected task exceptions in worker logs: every ``raised unexpected``, and every other traceback
    but a main process's broker reconnect or crash. Returns the task outcomes the logs report and how
    many tracebacks were broker reconnects and crashes."""
    outcomes: Counter[str] = Counter()
    reconnects = crash_records = 0
    for path in paths:
        text = path.read_text(errors="replace") if path.exists() else ""
        outcomes.update(m.group(2) for m in _OUTCOME.finditer(text))
        for record in _records(text):
            raised = _TASK_RAISED.search(record)
            if "Traceback" not in record and raised is None:
                continue
            header = _RECORD.match(record)
            main = raised is None and header is not None and header.group(2) == "MainProcess"
            if main and any(marker in record for marker in _BROKER_LOST):
                reconnects += 1
                continue
            if main and any(marker in record for marker in _CRASH):
                crash_records += 1
                continue
            group = f"{raised.group(1)}: {raised.group(2)}" if raised else "traceback"
            findings.add("task_exception", {"log": path.name, "record": _shorten(record)}, group=group)
    return {
        "task_outcomes": dict(sorted(outcomes.items())),
        "broker_reconnects": reconnects,
        "crash_records": crash_records,
    }


def _records(text: str) -> list[str]:
    starts = [m.start() for m in _RECORD.finditer(text)]
    if not starts:
        return [text] if text else []
    bounds = [*starts, len(text)]
    head = [text[: starts[0]]] if starts[0] > 0 else []
    return head + [text[a:b] for a, b in itertools.pairwise(bounds)]


def _shorten(record: str) -> str:
    lines = record.strip().splitlines()
    return "\n".join(lines if len(lines) <= 4 else [*lines[:2], "…", *lines[-2:]])
