"""The soak's short profile (``om bench soak`` at a small size): the deployed processes under every fault
kind, then every integrity check of issue 9 at zero.

One run: two ``om serve`` replicas, two ``om worker`` processes (concurrency 2) and ``om beat`` on a scratch
database and a private Redis; 12 conversations over about 24 s, their requests sent to both replicas in turn,
with two appenders on some threads, DELETEs with work in flight and re-creation, Postgres backends
terminated, duplicate deliveries, a worker SIGKILLed mid-task, Redis shut down and restarted, and a worker
SIGKILLed mid-cycle with Redis shut down without saving at the same moment. The processes' logs stay in the
test's tmp_path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bench.soak import FAULT_KINDS, NEVER, SoakOptions, resumed_after, run_soak
from bench.soak_checks import (
    VIOLATION_KINDS,
    ErasedThread,
    Findings,
    LiveThread,
    check_erased_threads,
    check_live_threads,
)
from om_core.adapters.store import SqlEventStore, create_event_store
from om_core.adapters.store.migrations import upgrade_to_head
from om_core.domain.envelope import RecordedEvent
from om_core.domain.events import (
    DomainEvent,
    MessageAppended,
    ObservationBufferCompleted,
    ObservationBufferFailed,
    ObservationBufferRequested,
    ObservationBufferStale,
    ObservationBufferStarted,
    SyncObservationCompleted,
    SyncObservationStarted,
    ThreadConfigured,
    to_new_event,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_short_soak_injects_every_fault_and_finds_no_violation(tmp_path: Path) -> None:
    report = run_soak(SoakOptions(threads=12, turns=10, seconds=24, settle_seconds=90, log_dir=tmp_path))

    faults = report["faults"]
    assert faults["not_injected"] == [], faults
    assert all(faults[kind] >= 1 for kind in FAULT_KINDS), faults
    assert faults["worker_sigkill_mid_task"] == 1, "the worker was killed while it ran a task"
    # with the default lease: a record whose cycle a killed worker cut short resumes its background work
    # within 60 s, whatever the broker lost
    recovery = report["recovery_after_worker_death_seconds"]
    assert recovery["interrupted_cycles"] >= 1 and recovery["unrecovered"] == [], recovery
    assert recovery["max"] <= 60, recovery
    assert report["threads"]["with_two_appenders"] >= 1
    assert report["messages"]["accepted"] > 0
    found = {k: report[k] for k in ("violations", "breakdown", "examples")}
    assert report["violations"] == dict.fromkeys(VIOLATION_KINDS, 0), json.dumps(found, indent=1)


def test_om_bench_soak_has_its_own_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "om_api.cli", "bench", "soak", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for option in ("--threads", "--turns", "--seconds", "--settle-seconds", "--log-dir"):
        assert option in done.stdout


# --- the checks themselves: each sees the violation it counts -----------------------------------------------

AT = "2026-01-05T10:00:00.000Z"


def sqlite_store(tmp_path: Path) -> SqlEventStore:
    url = f"sqlite:///{tmp_path}/checks.sqlite3"
    upgrade_to_head(url)
    return create_event_store(url)


def record(store: SqlEventStore, stream_id: str, events: Sequence[DomainEvent]) -> None:
    version = store.stream_version(stream_id)
    for offset, event in enumerate(events):
        store.append(stream_id, [to_new_event(event)], version + offset)


def appended(seq: int, message_id: str) -> MessageAppended:
    body = {"id": message_id, "role": "user", "parts": [{"type": "text", "text": f"note {seq}"}]}
    return MessageAppended(
        seq=seq,
        message_id=message_id,
        thread_id="t",
        role="user",
        created_at=AT,
        tokens=10,
        content_hash=f"hash-{seq}",
        message=body,
        text=f"note {seq}",
    )


def test_the_checks_count_messages_observed_by_nothing_lost_messages_and_unclosed_starts(
    tmp_path: Path,
) -> None:
    store = sqlite_store(tmp_path)
    stream = "soak/thread/t"
    record(
        store,
        stream,
        [
            ThreadConfigured(thread_id="t", at=AT),
            appended(1, "m1"),
            appended(2, "m2"),
            SyncObservationStarted(
                cycle_id="sync-obs-1",
                from_seq=1,
                to_seq=2,
                message_tokens=20,
                trigger="threshold",
                started_at=AT,
            ),
            # an empty answer committed as a success: m1 and m2 leave the window with no observation
            SyncObservationCompleted(
                cycle_id="sync-obs-1",
                from_seq=1,
                to_seq=2,
                message_ids=["m1", "m2"],
                message_tokens=20,
                observations="",
                observation_tokens=0,
                last_observed_at=AT,
                completed_at=AT,
            ),
            appended(3, "m3"),
            # requested, never ended
            ObservationBufferRequested(
                cycle_id="buffer-obs-2",
                from_seq=3,
                to_seq=3,
                message_tokens=10,
                pending_tokens=34,
                trigger="interval",
                requested_at=AT,
            ),
        ],
    )
    findings = Findings()
    try:
        check_live_threads(store, {}, [LiveThread("t", stream, {"m1", "m2", "m3", "m4"})], findings)
    finally:
        store.close()
    assert findings.counts == {"message_unobserved": 2, "message_lost": 1, "unclosed_start": 1}


def test_the_checks_count_what_an_erased_conversation_left_or_brought_back(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    erased_at = datetime.now(UTC) - timedelta(seconds=1)
    # gone and not re-created: a late task of the old conversation recorded its stale outcome anyway
    record(
        store, "soak/thread/gone", [ObservationBufferStale(cycle_id="buffer-obs-old", reason="late", at=AT)]
    )
    # re-created: its own messages are fine; a start of a cycle only the old lineage requested is not
    record(
        store,
        "soak/thread/again",
        [
            ThreadConfigured(thread_id="again", at=AT),
            appended(1, "r-1"),
            ObservationBufferStarted(cycle_id="buffer-obs-old", attempt=1, started_at=AT),
        ],
    )
    findings = Findings()
    try:
        check_erased_threads(
            store.engine,
            [
                ErasedThread("gone", "soak/thread/gone", erased_at, set()),
                ErasedThread("again", "soak/thread/again", erased_at, {"r-1"}),
            ],
            findings,
        )
    finally:
        store.close()
    assert findings.counts == {"erased_residue": 2}
    assert findings.breakdown() == {"erased_residue": {"om_events": 2}}


# --- what a worker's death cost: when the record's background work went on -----------------------------

DIED = datetime(2026, 1, 5, 10, 0, 10, tzinfo=UTC)


def recorded(events_at: Sequence[tuple[DomainEvent, int, str | None]]) -> list[RecordedEvent]:
    """Events as the store returns them: each recorded ``seconds`` after the death (a commit's events share
    their time), with the cause of their commit."""
    out = []
    for version, (event, seconds, cause) in enumerate(events_at, start=1):
        new = to_new_event(event, metadata={"cause": cause} if cause else {})
        out.append(
            RecordedEvent(
                global_position=version,
                stream_id="soak/thread/t",
                stream_version=version,
                event_id=new.event_id,
                event_type=new.event_type,
                schema_version=new.schema_version,
                data=new.data,
                metadata=new.metadata,
                recorded_at=DIED + timedelta(seconds=seconds),
            )
        )
    return out


def buffer_requested(cycle_id: str, through: int) -> ObservationBufferRequested:
    return ObservationBufferRequested(
        cycle_id=cycle_id,
        from_seq=1,
        to_seq=through,
        message_tokens=10 * through,
        pending_tokens=10 * through,
        trigger="interval",
        requested_at=AT,
    )


def buffer_completed(cycle_id: str, through: int) -> ObservationBufferCompleted:
    return ObservationBufferCompleted(
        cycle_id=cycle_id,
        from_seq=1,
        to_seq=through,
        message_ids=[f"m{i}" for i in range(1, through + 1)],
        message_tokens=10 * through,
        observations="* 🔴 (10:00) noted",
        observation_tokens=5,
        last_observed_at=AT,
        completed_at=AT,
    )


def lost(cycle_id: str) -> ObservationBufferFailed:
    return ObservationBufferFailed(
        cycle_id=cycle_id, error="worker lost", attempts=0, failed_at=AT, reason="worker_lost"
    )


BEFORE_THE_DEATH: list[tuple[DomainEvent, int, str | None]] = [
    (ThreadConfigured(thread_id="t", at=AT), -9, None),
    (appended(1, "m1"), -8, None),
    (appended(2, "m2"), -8, None),
    (buffer_requested("buffer-obs-a", 2), -8, None),
    (ObservationBufferStarted(cycle_id="buffer-obs-a", attempt=1, started_at=AT), -7, None),
]


def test_a_lost_cycle_closed_with_nothing_owed_resumes_the_record_at_its_closing() -> None:
    # the conversation is over: the recovery's commit closes the cycle and the policy asks for nothing
    stream = recorded([*BEFORE_THE_DEATH, (lost("buffer-obs-a"), 32, "lost-worker-recovery")])
    assert resumed_after(stream, "soak/thread/t", "buffer-obs-a", DIED) == DIED + timedelta(seconds=32)


def test_a_lost_cycle_asked_for_again_resumes_the_record_when_that_work_completes() -> None:
    stream = recorded(
        [
            *BEFORE_THE_DEATH,
            (lost("buffer-obs-a"), 32, "lost-worker-recovery"),
            (buffer_requested("buffer-obs-b", 2), 32, "lost-worker-recovery"),
            (buffer_completed("buffer-obs-b", 2), 33, None),
        ]
    )
    assert resumed_after(stream, "soak/thread/t", "buffer-obs-a", DIED) == DIED + timedelta(seconds=33)
    # the work asked for again never completed: not resumed
    assert resumed_after(stream[:-1], "soak/thread/t", "buffer-obs-a", DIED) == NEVER


def test_a_cycle_taken_over_resumes_at_its_result_and_one_never_closed_never_resumes() -> None:
    taken_over = recorded([*BEFORE_THE_DEATH, (buffer_completed("buffer-obs-a", 2), 21, None)])
    assert resumed_after(taken_over, "soak/thread/t", "buffer-obs-a", DIED) == DIED + timedelta(seconds=21)
    assert resumed_after(recorded(BEFORE_THE_DEATH), "soak/thread/t", "buffer-obs-a", DIED) == NEVER


def test_a_cycle_that_ended_before_the_death_was_not_interrupted() -> None:
    done = recorded([*BEFORE_THE_DEATH, (buffer_completed("buffer-obs-a", 2), -1, None)])
    assert resumed_after(done, "soak/thread/t", "buffer-obs-a", DIED) is None
