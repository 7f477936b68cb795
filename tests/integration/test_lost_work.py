"""Work in flight under leases, in process on SQLite (the same use cases the workers run): a cycle whose
holder's lease lapses is taken back and asked for again at once; a live holder's cycle is left to it, by a
redelivery and by a reader waiting on it; a holder known dead on this host is replaced without waiting."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from om_core.application.append import append_messages
from om_core.application.context import get_context
from om_core.application.deps import Deps
from om_core.application.leases import LeaseKeeper, dead_on_this_host, held_lease, holder_id
from om_core.application.maintenance import recover_lost_cycles
from om_core.application.ports import WorkDispatcher
from om_core.application.projections import rebuild_projections
from om_core.application.repository import load_state
from om_core.application.task_requests import cycle_key
from om_core.application.work import WorkOutcome, run_task
from om_core.bootstrap import build_deps
from om_core.domain.envelope import TaskRequest
from testing.conversations import filler_message, memory_profile
from testing.processes import wait_for

TENANT = "t"


class HeldTasks(WorkDispatcher):
    """Requested work waits here: nothing runs it unless the test does."""

    runs_inline = True

    def __init__(self) -> None:
        self.queue: list[TaskRequest] = []

    def dispatch(self, tasks: Sequence[TaskRequest]) -> None:
        self.queue.extend(tasks)


@pytest.fixture
def deps(tmp_path: Path) -> Iterator[Deps]:
    made = build_deps(
        database_url=f"sqlite:///{tmp_path}/om.sqlite3",
        dispatcher=HeldTasks(),
        profile=memory_profile(0),
        migrate=True,
        lease_seconds=30,
    )
    yield made
    made.close()


def _stream(thread: str) -> str:
    return f"{TENANT}/thread/{thread}"


def _buffer_requested(deps: Deps, thread: str) -> str:
    for index in range(80):
        outcome = append_messages(
            deps, tenant=TENANT, thread_id=thread, messages=[filler_message(thread, index)]
        )
        for event in outcome.events:
            if type(event).__name__ == "ObservationBufferRequested":
                return str(event.cycle_id)  # type: ignore[attr-defined]
    raise AssertionError("no buffer was requested")


def _lapse(deps: Deps, key: str, stream_id: str, holder: str = "elsewhere/1/dead") -> None:
    """A holder on another host took the cycle and then died: its lease lapses, nobody renews it."""
    assert deps.leases.acquire_lease(key, stream_id, holder, 0.05) is None
    time.sleep(0.2)


def test_a_lapsed_lease_closes_its_cycle_as_lost_and_asks_for_the_work_again_at_once(deps: Deps) -> None:
    thread = "lost"
    cycle = _buffer_requested(deps, thread)
    stream = _stream(thread)
    _lapse(deps, cycle_key(stream, cycle), stream)

    assert recover_lost_cycles(deps) == [(stream, cycle)]
    events = deps.store.read_stream(stream)
    failed = [e for e in events if e.event_type == "ObservationBufferFailed"]
    assert [(e.data["cycle_id"], e.data["reason"], e.data["attempts"]) for e in failed] == [
        (cycle, "worker_lost", 0)
    ]
    assert "elsewhere/1/dead stopped renewing its lease" in failed[0].data["error"]
    # asked for again in the same commit, for the same messages
    requested = [e for e in events if e.event_type == "ObservationBufferRequested"]
    assert len(requested) == 2 and requested[-1].stream_version == failed[0].stream_version + 1
    assert requested[-1].data["from_seq"] == requested[0].data["from_seq"]
    assert not deps.leases.lapsed_leases()
    assert recover_lost_cycles(deps) == []
    # the new cycle runs and completes
    again = str(requested[-1].data["cycle_id"])
    assert run_task(deps, "om.observe_buffer", stream, again) is WorkOutcome.COMPLETED
    # the dead worker's message, redelivered later, changes nothing and calls no model
    before = load_state(deps.records, deps.store, stream)
    assert run_task(deps, "om.observe_buffer", stream, cycle) is WorkOutcome.DUPLICATE
    assert load_state(deps.records, deps.store, stream).version == before.version
    assert rebuild_projections(deps.records, deps.store, verify_only=True).mismatched == []


def test_a_model_failure_is_recorded_without_a_reason(deps: Deps) -> None:
    thread = "model-failed"
    cycle = _buffer_requested(deps, thread)
    stream = _stream(thread)
    observation = {**deps.profile["observation"], "providerOptions": {"omLocal": {"errorRate": 1}}}
    failing = replace(deps, profile={**deps.profile, "observation": observation})
    assert run_task(failing, "om.observe_buffer", stream, cycle) is WorkOutcome.FAILED
    events = deps.store.read_stream(stream)
    [failed] = [e for e in events if e.event_type == "ObservationBufferFailed"]
    assert "reason" not in failed.data
    # not asked for again until the conversation grows: a failing model is not called in a loop
    assert events[-1] == failed


def test_a_live_holders_cycle_is_left_to_it_and_a_dead_local_holder_is_replaced_at_once(deps: Deps) -> None:
    thread = "held"
    cycle = _buffer_requested(deps, thread)
    stream = _stream(thread)
    key = cycle_key(stream, cycle)
    with held_lease(deps, key, stream) as holder:
        assert holder is None
        # a redelivery in another thread of this process, and a second worker elsewhere, leave it alone
        seen: list[WorkOutcome] = []
        other = threading.Thread(
            target=lambda: seen.append(run_task(deps, "om.observe_buffer", stream, cycle))
        )
        other.start()
        other.join()
        assert seen == [WorkOutcome.BUSY]
    assert deps.leases.acquire_lease(key, stream, "elsewhere/2/alive", 30) is None
    assert run_task(deps, "om.observe_buffer", stream, cycle) is WorkOutcome.BUSY
    deps.leases.release_lease(key, "elsewhere/2/alive")

    # a prefork child killed on this host: its pid is gone, so its lease is taken over without waiting
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = f"{holder_id().split('/')[0]}/{gone.stdout.strip()}/feedbeef"
    assert dead_on_this_host(dead)
    # a child killed with its parent, never reaped: it answers a signal but runs nothing
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        wait_for(lambda: _state_of(zombie.pid) == "Z", 30, 0.05, what="the child to exit")
        assert dead_on_this_host(f"{holder_id().split('/')[0]}/{zombie.pid}/feedbeef")
    finally:
        zombie.wait()
    assert not dead_on_this_host(holder_id())
    assert not dead_on_this_host("another-host/1/abcd")
    assert deps.leases.acquire_lease(key, stream, dead, 30) is None
    assert run_task(deps, "om.observe_buffer", stream, cycle) is WorkOutcome.COMPLETED
    assert not deps.leases.lapsed_leases()


def _state_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_reader_waits_for_a_live_holder_and_takes_the_cycle_over_when_its_lease_lapses(
    tmp_path: Path,
) -> None:
    profile = memory_profile(0, messageTokens=400, bufferTokens=False, blockAfter=None)
    deps = build_deps(
        database_url=f"sqlite:///{tmp_path}/om.sqlite3",
        dispatcher=HeldTasks(),
        profile=profile,
        migrate=True,
        sync_wait_seconds=0,
        lease_seconds=30,
    )
    try:
        thread = "sync"
        stream = _stream(thread)
        for index in range(12):
            append_messages(deps, tenant=TENANT, thread_id=thread, messages=[filler_message(thread, index)])
        # a worker elsewhere took the synchronous cycle a reader started, then vanished
        state = load_state(deps.records, deps.store, stream)
        assert state.pending_tokens > 400, "the next read must observe"
        taken = threading.Event()
        original = deps.leases.acquire_lease

        def first_taken_elsewhere(
            key: str, stream_id: str, holder: str, seconds: float, **kw: Any
        ) -> str | None:
            if not taken.is_set():
                taken.set()
                assert original(key, stream_id, "elsewhere/3/vanished", 0.5) is None
            return original(key, stream_id, holder, seconds, **kw)

        deps.leases.acquire_lease = first_taken_elsewhere  # type: ignore[method-assign]
        started = time.monotonic()
        window = get_context(deps, tenant=TENANT, thread_id=thread)
        waited = time.monotonic() - started
        assert taken.is_set()
        assert waited >= 0.4, "the reader left the cycle to its live holder while its lease lasted"
        assert window.status["overBudget"] is None or window.pending_tokens <= 400
        events = deps.store.read_stream(stream)
        assert [e.event_type for e in events].count("SyncObservationCompleted") == 1
        assert "SyncObservationFailed" not in [e.event_type for e in events]
        assert rebuild_projections(deps.records, deps.store, verify_only=True).mismatched == []
    finally:
        deps.close()


def test_a_model_call_longer_than_the_lease_keeps_its_cycle_while_its_process_lives(tmp_path: Path) -> None:
    # the call takes longer than the lease; the lease is renewed every third of it meanwhile (the margin:
    # a renewal may be two thirds of a lease late)
    deps = build_deps(
        database_url=f"sqlite:///{tmp_path}/om.sqlite3",
        dispatcher=HeldTasks(),
        profile=memory_profile(12_000),
        migrate=True,
        lease_seconds=9,
    )
    try:
        thread = "long-call"
        cycle = _buffer_requested(deps, thread)
        stream = _stream(thread)
        outcome: list[WorkOutcome] = []
        running = threading.Thread(
            target=lambda: outcome.append(run_task(deps, "om.observe_buffer", stream, cycle))
        )
        running.start()
        taken_back: list[tuple[str, str]] = []
        while running.is_alive():
            taken_back += recover_lost_cycles(deps)
            running.join(0.5)
        assert taken_back == [] and outcome == [WorkOutcome.COMPLETED]
        assert [e.event_type for e in deps.store.read_stream(stream)].count("ObservationBufferFailed") == 0
    finally:
        deps.close()


def test_the_keeper_renews_what_is_held_and_notices_a_lease_taken_back(deps: Deps) -> None:
    stream = "t/thread/keeper"
    keeper = LeaseKeeper(deps.leases, seconds=0.3)
    assert deps.leases.acquire_lease("k1", stream, holder_id(), 0.3) is None
    assert deps.leases.acquire_lease("k2", stream, holder_id(), 0.3) is None
    keeper.add("k1")
    keeper.add("k2")
    time.sleep(0.5)
    keeper.renew_now()
    assert {lease.key for lease in deps.leases.lapsed_leases()} == set(), "renewed after their lapse"
    # somebody took k2 back meanwhile (it lapsed and was taken over)
    deps.leases.release_lease("k2", holder_id())
    assert deps.leases.acquire_lease("k2", stream, "elsewhere/4/new", 30) is None
    keeper.renew_now()
    assert keeper.lost("k2") and not keeper.lost("k1")
    keeper.remove("k1")
    keeper.remove("k2")


def test_a_lease_this_process_failed_to_release_is_taken_again_unless_a_block_of_it_runs_the_work(
    deps: Deps,
) -> None:
    """The store was out of reach when a task released its lease, and the task is retried in the same
    process: its own leftover lease lets it run the work at once; a block of this process still running
    the same work keeps it to itself."""
    stream = "t/thread/leftover"
    key = "leftover-cycle"
    assert deps.leases.acquire_lease(key, stream, holder_id(), 30) is None  # the release that failed
    with held_lease(deps, key, stream) as taken:
        assert taken is None
        with held_lease(deps, key, stream) as again:
            assert again == holder_id(), "a second block of this process ran the work beside the first"
    assert deps.leases.acquire_lease(key, stream, "elsewhere/2/next", 30) is None, "released after the block"
    with held_lease(deps, key, stream) as busy:
        assert busy == "elsewhere/2/next"
