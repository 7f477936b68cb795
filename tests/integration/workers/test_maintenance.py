"""Beat's scans on a real Postgres: stuck-cycle recovery, the idle sweep, the advisory lock, the relay."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from om_core.domain.events import effect_event_id
from om_workers.app import create_app
from om_workers.beat import LOCK_SWEEP, scan_lock, sweep
from om_workers.relay import relay_outbox

from .conftest import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_stuck_cycle_is_failed_by_the_sweep_and_a_late_outcome_is_rejected(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(latency_ms=0)
    thread = cluster.new_thread()  # no worker: the requested cycle stays in flight
    cycle = cluster.append_until_buffer_requested(thread)
    stream = cluster.stream(thread)
    assert stream in cluster.deps.store.list_streams_with_pending_work()

    report = sweep(cluster.deps, stuck_after=timedelta(hours=1))
    assert report.recovered == {}, "a young cycle is not stuck"

    real_clock = cluster.deps.clock
    cluster.deps.clock = lambda: real_clock() + timedelta(hours=2)
    with scan_lock(cluster.deps.store, LOCK_SWEEP) as held:
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
    store = cluster.deps.store
    assert len(store.fetch_unpublished_tasks()) == 1
    app = cluster.deps.dispatcher.app  # type: ignore[attr-defined]
    assert relay_outbox(app, store, older_than_seconds=0).failed == 1
    settings = cluster.settings().model_copy(update={"broker_url": "redis://127.0.0.1:6379/11"})
    report = relay_outbox(create_app(settings, cluster.worker_settings()), store, older_than_seconds=0)
    assert (report.published, report.failed) == (1, 0)
    assert store.fetch_unpublished_tasks() == []
