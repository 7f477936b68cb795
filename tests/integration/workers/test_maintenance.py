"""Beat's scans on a real Postgres: stuck-cycle recovery, the idle sweep, the advisory lock, the relay."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from om_core.domain.events import effect_event_id
from om_workers.app import create_app
from om_workers.beat import LOCK_SWEEP, sweep
from om_workers.relay import relay_outbox

from .conftest import REDIS_URL, Cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_stuck_cycle_is_failed_by_the_sweep_and_a_late_outcome_is_rejected(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(latency_ms=0)
    thread = cluster.new_thread()  # no worker: the requested cycle stays in flight
    cycle = cluster.append_until_buffer_requested(thread)
    stream = cluster.stream(thread)
    assert stream in cluster.deps.records.list_streams_with_pending_work()

    report = sweep(cluster.deps, stuck_after=timedelta(hours=1))
    assert report.recovered == {}, "a young cycle is not stuck"

    real_clock = cluster.deps.clock
    cluster.deps.clock = lambda: real_clock() + timedelta(hours=2)
    with cluster.deps.locks.try_lock(LOCK_SWEEP) as held:
        assert held
        assert not sweep(cluster.deps, stuck_after=timedelta(hours=1)).locked, "a second scanner skips"
    report = sweep(cluster.deps, stuck_after=timedelta(hours=1))
    assert report.recovered == {stream: [cycle]}
    failed = cluster.deps.store.find_event(effect_event_id(stream, cycle, "outcome"))
    assert failed is not None and failed.event_type == "ObservationBufferFailed"
    assert failed.data["error"].startswith("timeout")

    # the original message, delivered late, finds the cycle's outcome taken: no second effect
    from om_core.application.work import WorkOutcome, run_task

    assert run_task(cluster.deps, "om.observe_buffer", stream, cycle) == WorkOutcome.DUPLICATE


def test_relay_publishes_what_the_dispatcher_left_behind(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(latency_ms=0, broker_url="redis://127.0.0.1:1/0")  # nothing listens
    thread = cluster.new_thread()
    cluster.append_until_buffer_requested(thread)
    outbox = cluster.deps.outbox
    assert len(outbox.fetch_unpublished_tasks()) == 1
    app = cluster.deps.dispatcher.app  # type: ignore[attr-defined]
    assert relay_outbox(app, outbox, older_than_seconds=0).failed == 1
    settings = cluster.settings().model_copy(update={"broker_url": REDIS_URL})
    report = relay_outbox(create_app(settings, cluster.worker_settings()), outbox, older_than_seconds=0)
    assert (report.published, report.failed) == (1, 0)
    assert outbox.fetch_unpublished_tasks() == []


def test_a_running_beat_activates_the_chunks_of_an_idle_thread(cluster_factory: Any) -> None:
    """Idle TTL end to end: a worker buffers a chunk, nobody writes or reads the thread again, and the
    sweep scheduled by a real `celery beat` process activates the chunk once the TTL has passed."""
    from om_core.application.append import append_messages
    from testing.conversations import filler_message
    from testing.processes import wait_for

    from .conftest import TENANT

    # longer than the worker needs to buffer, so the sweep (every 2 s here) is what activates, not the
    # outcome's own commit
    cluster: Cluster = cluster_factory(latency_ms=0, activateAfterIdle=4_000)
    cluster.worker("w1")
    thread = cluster.new_thread()
    for turn in range(60):
        turns = [filler_message(thread, 2 * turn), filler_message(thread, 2 * turn + 1, role="assistant")]
        outcome = append_messages(cluster.deps, tenant=TENANT, thread_id=thread, messages=turns)
        if any(type(e).__name__ == "ObservationBufferRequested" for e in outcome.events):
            break
    wait_for(lambda: cluster.state(thread).chunks or None, timeout=20, what="the worker to buffer a chunk")
    # the user's next question: the buffered turns are history now, which is what an activation may take
    question = filler_message(thread, 200)
    append_messages(cluster.deps, tenant=TENANT, thread_id=thread, messages=[question])
    assert cluster.state(thread).stats.activations == 0
    cluster.beat()
    wait_for(lambda: cluster.state(thread).stats.activations or None, timeout=30, what="the idle sweep")
    (activated, *_) = cluster.events(thread, "ChunksActivated")
    assert activated.data["triggered_by"] == "ttl" and activated.data["ttl_expired_ms"] >= 4_000
    assert activated.metadata.get("cause") == "idle-sweep"
    state = cluster.state(thread)
    newest = next(m for m in state.window if m.message_id == question["id"])
    assert all(chunk.to_seq >= newest.seq for chunk in state.chunks), "only the newest turn stays buffered"
