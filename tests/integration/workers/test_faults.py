"""The work path (docs/operations.md, How work flows) under faults: nothing lost, nothing applied twice,
blockAfter holds with a slow model."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa

from om_core.application.append import append_messages
from om_core.application.configuration import record_config
from om_core.application.context import get_context
from om_core.application.repository import replay_state
from om_core.domain.events import effect_event_id
from om_core.domain.policy import resolve_limits
from om_workers.dispatcher import publish
from testing.processes import RedisServer, free_port, wait_for

from .conftest import TENANT, Cluster, message

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def completed_cycles(cluster: Cluster, thread: str, cycle: str) -> list[Any]:
    return [e for e in cluster.events(thread, "ObservationBufferCompleted") if e.data["cycle_id"] == cycle]


def test_worker_sigkilled_mid_observation_is_redelivered_and_yields_one_chunk(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(latency_ms=3000)
    first = cluster.worker("doomed")
    thread = cluster.new_thread()
    cycle = cluster.append_until_buffer_requested(thread)
    wait_for(lambda: cluster.events(thread, "ObservationBufferStarted"), 30, what="the observation to start")
    time.sleep(0.5)  # inside the 3 s model call
    first.kill()
    assert not completed_cycles(cluster, thread, cycle), "the killed worker must not have finished"

    second = cluster.worker("survivor")
    wait_for(lambda: completed_cycles(cluster, thread, cycle), 45, what="the redelivered task to complete")
    time.sleep(1.0)  # any second copy would land now
    assert len(completed_cycles(cluster, thread, cycle)) == 1
    state = cluster.state(thread)
    assert [c.cycle_id for c in state.chunks].count(cycle) + sum(
        cycle in seg.cycle_ids for seg in state.log
    ) == 1
    assert cycle in second.log(), "the survivor ran the redelivered message"


def test_broker_down_appends_succeed_and_every_task_runs_once_it_is_back(cluster_factory: Any) -> None:
    broker = RedisServer(free_port())
    broker.start()
    try:
        cluster: Cluster = cluster_factory(latency_ms=0, broker_url=broker.url)
        cluster.worker("w1")
        cluster.beat()
        thread = cluster.new_thread()
        broker.kill()
        for index in range(40):
            started = time.monotonic()
            append_messages(cluster.deps, tenant=TENANT, thread_id=thread, messages=[message(thread, index)])
            assert time.monotonic() - started < 10, "an append waited on the dead broker"
        requested = [e.data["cycle_id"] for e in cluster.events(thread, "ObservationBufferRequested")]
        assert requested, "the appends requested background work"
        assert cluster.deps.outbox.fetch_unpublished_tasks(), "the requests wait in the outbox"

        broker.start()

        def all_done() -> bool:
            store = cluster.deps.store
            outcomes = [
                store.find_event(effect_event_id(cluster.stream(thread), c, "outcome")) for c in requested
            ]
            return all(outcomes) and not cluster.deps.outbox.fetch_unpublished_tasks()

        wait_for(all_done, 60, 0.2, what="every outbox task to run after the broker came back")
        types = {
            cluster.deps.store.find_event(effect_event_id(cluster.stream(thread), c, "outcome")).event_type  # type: ignore[union-attr]
            for c in requested
        }
        assert types == {"ObservationBufferCompleted"}
    finally:
        broker.kill()


def test_same_task_delivered_twice_has_one_effect(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(latency_ms=800)
    a = cluster.worker("a")
    b = cluster.worker("b")
    thread = cluster.new_thread()
    cycle = cluster.append_until_buffer_requested(thread)
    key = f"{cluster.stream(thread)}:{cycle}"
    app = cluster.deps.dispatcher.app  # type: ignore[attr-defined]
    publish(
        app, "om.observe_buffer", "om.buffer", key, {"stream_id": cluster.stream(thread), "cycle_id": cycle}
    )

    def both_ran() -> bool:
        lines = [
            line
            for line in (a.log() + b.log()).splitlines()
            if f"om.observe_buffer {cluster.stream(thread)} {cycle}:" in line
        ]
        return len(lines) >= 2

    wait_for(both_ran, 45, 0.2, what="both deliveries to run")
    outcomes = a.log() + b.log()
    assert outcomes.count(f"{cycle}: completed") == 1
    # the second delivery found the cycle done, or still held by the first worker's lease: either way it
    # called no model and wrote nothing
    assert outcomes.count(f"{cycle}: duplicate") + outcomes.count(f"{cycle}: busy") == 1
    assert len(completed_cycles(cluster, thread, cycle)) == 1
    stale = [e for e in cluster.events(thread, "ObservationBufferStale") if e.data["cycle_id"] == cycle]
    assert stale == []


def test_twenty_concurrent_writers_on_one_thread(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(latency_ms=50)
    cluster.worker("w", concurrency=2)
    thread = cluster.new_thread()
    errors: list[BaseException] = []
    per_writer = 5

    def writer(w: int) -> None:
        try:
            for i in range(per_writer):
                append_messages(
                    cluster.deps,
                    tenant=TENANT,
                    thread_id=thread,
                    messages=[message(f"{thread}-w{w}", i, words=12)],
                )
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors

    expected = {f"{thread}-w{w}-{i}" for w in range(20) for i in range(per_writer)}
    wait_for(lambda: cluster.state(thread).buffer_in_flight is None, 30, what="background work to settle")
    events = cluster.events(thread)
    assert [e.stream_version for e in events] == list(range(1, len(events) + 1))
    appended = [e.data["message_id"] for e in events if e.event_type == "MessageAppended"]
    assert sorted(appended) == sorted(expected), "every message exactly once"
    seqs = [e.data["seq"] for e in events if e.event_type == "MessageAppended"]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    # the inline projection equals a fresh fold of the events
    assert (
        cluster.state(thread).to_json() == replay_state(cluster.deps.store, cluster.stream(thread)).to_json()
    )


def _kill_connections_mid_task(
    cluster_factory: Any, database_url: str, *, refuse_seconds: float
) -> tuple[Cluster, Any, str, str]:
    """A worker's database connections terminated while its task waits for the model, and new ones to the
    database refused for ``refuse_seconds`` after that."""
    cluster: Cluster = cluster_factory(latency_ms=2000)
    app_name = f"om_dbdrop_{int(time.time() * 1000) % 10**8}"
    worker_url = f"{database_url}?application_name={app_name}"
    worker = cluster.worker("dbdrop", pool="solo", env={**cluster.env(), "OM_DATABASE_URL": worker_url})
    thread = cluster.new_thread()
    cycle = cluster.append_until_buffer_requested(thread)
    wait_for(lambda: cluster.events(thread, "ObservationBufferStarted"), 30, what="the observation to start")
    database = sa.make_url(database_url).database
    admin = sa.create_engine(sa.make_url(database_url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            if refuse_seconds:
                conn.execute(sa.text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false'))
            try:
                killed = conn.scalar(
                    sa.text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                        " WHERE application_name = :n"
                    ),
                    {"n": app_name},
                )
                assert killed, "the worker held a database connection"
                time.sleep(refuse_seconds)
            finally:
                conn.execute(sa.text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true'))
    finally:
        admin.dispose()
    return cluster, worker, thread, cycle


def test_database_connections_killed_mid_task_still_complete_the_cycle_once(
    cluster_factory: Any, database_url: str
) -> None:
    """The dead connections are replaced (a read meeting one runs again on a new one; a write fails and
    the task is retried): either way the cycle completes, once."""
    cluster, _, thread, cycle = _kill_connections_mid_task(cluster_factory, database_url, refuse_seconds=0)
    wait_for(lambda: completed_cycles(cluster, thread, cycle), 45, 0.2, what="the cycle to complete")
    assert len(completed_cycles(cluster, thread, cycle)) == 1
    _assert_folds(cluster, thread)


def test_database_unreachable_mid_task_retries_and_completes(cluster_factory: Any, database_url: str) -> None:
    cluster, worker, thread, cycle = _kill_connections_mid_task(
        cluster_factory, database_url, refuse_seconds=3
    )
    wait_for(lambda: completed_cycles(cluster, thread, cycle), 45, 0.2, what="the retried task to complete")
    assert len(completed_cycles(cluster, thread, cycle)) == 1
    assert "Retry in" in worker.log(), "the task was retried while the database refused connections"
    _assert_folds(cluster, thread)


def _assert_folds(cluster: Cluster, thread: str) -> None:
    """The stream folds from its events to exactly its stored state."""
    assert (
        cluster.state(thread).to_json() == replay_state(cluster.deps.store, cluster.stream(thread)).to_json()
    )


def test_slow_model_never_exceeds_block_after_and_reads_below_it_never_wait(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(latency_ms=2000)
    cluster.worker("slow", concurrency=2)
    cluster.deps.sync_wait_seconds = 15
    thread = cluster.new_thread()
    reads: list[tuple[int, float, int]] = []  # (pending before the read, seconds, pending returned)
    block_after = 0
    stop_at = time.monotonic() + 25
    index = 0
    while time.monotonic() < stop_at:
        append_messages(cluster.deps, tenant=TENANT, thread_id=thread, messages=[message(thread, index)])
        before = cluster.state(thread)
        limits = resolve_limits(record_config(cluster.deps.profile, before), before)
        assert limits.block_after is not None
        block_after = limits.block_after
        p = before.pending_tokens
        started = time.monotonic()
        window = get_context(cluster.deps, tenant=TENANT, thread_id=thread)
        reads.append((p, time.monotonic() - started, window.pending_tokens))
        append_messages(
            cluster.deps,
            tenant=TENANT,
            thread_id=thread,
            messages=[message(thread, index, role="assistant", words=10) | {"id": f"{thread}-a{index}"}],
        )
        index += 1
        time.sleep(0.02)

    assert all(after < block_after for _, _, after in reads), "a read returned more than blockAfter"
    below = [r for r in reads if r[0] < block_after]
    # the model takes 2 s a call: a read that waited for one would take at least that long
    waited_below = [r for r in below if r[1] >= 1.0]
    assert not waited_below, f"reads below blockAfter waited for a model: {waited_below}"
    assert any(p >= block_after for p, *_ in reads), "the stream outran the slow model at least once"
    assert len(below) > 10
