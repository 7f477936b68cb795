"""A worker that dies mid-cycle, or stalls past its lease, on real prefork workers, Redis and Postgres
(docs/operations.md, Work in flight): the cycle is taken back in seconds whatever the broker lost, its work
runs again on a live worker, and a late result is recorded stale with its usage, never applied."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from om_core.application.projections import rebuild_projections
from om_core.domain.events import effect_event_id
from testing.processes import RedisServer, free_port, wait_for

from .conftest import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

# a short lease, so a test waits seconds for a lapse (the mechanism is the same at the default 30 s), and the
# stuck-cycle sweep out of reach: whatever takes the work back here is the lease
LEASES = {
    "OM_LEASE_SECONDS": "4",
    "OM_WORKER_RECOVER_INTERVAL": "1",
    "OM_WORKER_REQUEUE_AFTER": "5",
    # the production time limits: a worker stopped for a while must not have its task cut by the soft
    # limit when it goes on (stopped time counts), or it would have no late result to record
    "OM_WORKER_SOFT_TIME_LIMIT": "240",
    "OM_WORKER_TIME_LIMIT": "300",
    "OM_WORKER_VISIBILITY_TIMEOUT": "600",
    "OM_WORKER_STUCK_AFTER": "900",
}


def _cycle_events(cluster: Cluster, thread: str, cycle: str, *types: str) -> list[Any]:
    return [e for e in cluster.events(thread, *types) if e.data.get("cycle_id") == cycle]


def _next_completed_buffer(cluster: Cluster, thread: str, after_version: int) -> Any:
    return next(
        (e for e in cluster.events(thread, "ObservationBufferCompleted") if e.stream_version > after_version),
        None,
    )


def _folds_to_its_stored_state(cluster: Cluster) -> None:
    assert rebuild_projections(cluster.deps.records, cluster.deps.store, verify_only=True).mismatched == []


def test_a_worker_killed_mid_cycle_with_the_broker_restarted_empty_is_taken_back_in_seconds(
    cluster_factory: Any,
) -> None:
    broker = RedisServer(free_port())
    broker.start()
    try:
        cluster: Cluster = cluster_factory(latency_ms=3000, broker_url=broker.url)
        env = cluster.env(**LEASES)
        doomed = cluster.worker("doomed", concurrency=2, env=env)
        thread = cluster.new_thread()
        cycle = cluster.append_until_buffer_requested(thread)
        wait_for(
            lambda: _cycle_events(cluster, thread, cycle, "ObservationBufferStarted"),
            30,
            what="the observation to start",
        )
        # inside the 3 s model call: the worker dies, and the broker forgets its unacknowledged message
        doomed.kill()
        broker.shutdown_nosave()
        broker.start()
        assert not _cycle_events(cluster, thread, cycle, "ObservationBufferCompleted")

        cluster.worker("survivor", concurrency=2, env=env)
        cluster.beat(env=env)

        [lost] = wait_for(
            lambda: _cycle_events(cluster, thread, cycle, "ObservationBufferFailed"),
            120,
            0.2,
            what="the cycle of the dead worker to be taken back",
        )
        # taken back by its lease, not by the stuck-cycle sweep (its reason would be "timeout")
        assert lost.data["reason"] == "worker_lost"
        assert lost.event_id == effect_event_id(cluster.stream(thread), cycle, "outcome")
        assert "stopped renewing its lease" in lost.data["error"]
        # its work is requested again in the same commit, and runs on the live worker
        again = wait_for(
            lambda: _next_completed_buffer(cluster, thread, lost.stream_version),
            120,
            0.2,
            what="the record's next background cycle to complete",
        )
        assert again.data["from_seq"] == lost_from_seq(cluster, thread, cycle)
        state = cluster.state(thread)
        assert state.buffer_in_flight is None or state.buffer_in_flight.cycle_id != cycle
        assert not cluster.deps.leases.lapsed_leases()
        _folds_to_its_stored_state(cluster)
    finally:
        broker.kill()


def lost_from_seq(cluster: Cluster, thread: str, cycle: str) -> int:
    [requested] = _cycle_events(cluster, thread, cycle, "ObservationBufferRequested")
    return int(requested.data["from_seq"])


def test_a_worker_stalled_past_its_lease_records_its_late_result_stale_with_its_usage(
    cluster_factory: Any,
) -> None:
    cluster: Cluster = cluster_factory(latency_ms=3000)
    env = cluster.env(**LEASES)
    slow = cluster.worker("slow", concurrency=1, env=env)
    thread = cluster.new_thread()
    cycle = cluster.append_until_buffer_requested(thread)
    wait_for(
        lambda: _cycle_events(cluster, thread, cycle, "ObservationBufferStarted"),
        30,
        what="the observation to start",
    )
    assert slow.proc is not None
    # the whole worker stops (its lease renewals too) for longer than a lease, then goes on
    os.killpg(slow.proc.pid, signal.SIGSTOP)
    try:
        cluster.worker("live", concurrency=1, env=env)
        cluster.beat(env=env)
        # taken back: failed as worker_lost (and asked for again), or run to its end by the live worker
        # when the broker hands it the stalled worker's message and finds the lease lapsed
        wait_for(
            lambda: cluster.deps.store.find_event(effect_event_id(cluster.stream(thread), cycle, "outcome")),
            120,
            0.2,
            what="the stalled worker's cycle to be taken back",
        )
    finally:
        os.killpg(slow.proc.pid, signal.SIGCONT)
    late_id = effect_event_id(cluster.stream(thread), cycle, "late")
    [late] = wait_for(
        lambda: [e for e in cluster.events(thread, "ObservationBufferStale") if e.event_id == late_id],
        120,
        0.2,
        what="the stalled worker's late result",
    )
    assert late.data["usage"]["calls"] >= 1, "what the discarded call cost is kept"
    # never applied: the cycle has one outcome, and it is not the stalled worker's
    assert (
        len(_cycle_events(cluster, thread, cycle, "ObservationBufferCompleted", "ObservationBufferFailed"))
        == 1
    )
    assert f"{cycle}: completed" not in slow.log()
    assert cluster.state(thread).stats.stale_results >= 1
    _folds_to_its_stored_state(cluster)
