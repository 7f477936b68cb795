"""Erasure with work in flight (issue: erasure is final): real worker processes, a slow model."""

from __future__ import annotations

import time
from typing import Any

import pytest
import sqlalchemy as sa

from om_core.adapters.store.schema import events, indexed_groups, messages, outbox, records
from om_core.application.append import append_messages
from om_core.application.erase import erase_thread
from om_core.application.projections import rebuild_projections
from testing.processes import wait_for
from testing.store import engine_of

from .conftest import TENANT, Cluster, message

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def rows_of(cluster: Cluster, stream: str) -> dict[str, int]:
    engine = engine_of(cluster.deps)
    with engine.connect() as conn:
        return {
            table.name: int(
                conn.scalar(sa.select(sa.func.count()).select_from(table).where(table.c.stream_id == stream))
                or 0
            )
            for table in (events, records, messages, outbox, indexed_groups)
        }


def test_an_erased_thread_stays_erased_while_its_work_finishes_and_can_be_created_again(
    cluster_factory: Any,
) -> None:
    cluster: Cluster = cluster_factory(latency_ms=1500)
    cluster.profile["retrieval"] = {"vector": True}
    worker = cluster.worker("w1", concurrency=2)
    thread = cluster.new_thread()
    stream = cluster.stream(thread)
    cycle = cluster.append_until_buffer_requested(thread)
    wait_for(lambda: cluster.events(thread, "ObservationBufferStarted"), 30, what="the observation to start")

    erase_thread(cluster.deps, tenant=TENANT, thread_id=thread)
    assert rows_of(cluster, stream) == dict.fromkeys(rows_of(cluster, stream), 0)

    # the model call ends ~1.5 s later; its outcome must find nothing to write to
    wait_for(lambda: f"{cycle}" in worker.log() and "erased" in worker.log(), 30, what="the task to end")
    time.sleep(1.0)
    assert all(count == 0 for count in rows_of(cluster, stream).values()), rows_of(cluster, stream)
    assert "raised unexpected" not in worker.log() and "Traceback" not in worker.log()

    # the same id again: a lineage of its own, which verifies like any other
    again = append_messages(cluster.deps, tenant=TENANT, thread_id=thread, messages=[message(thread, 0)])
    recreated = cluster.events(thread)
    assert [e.stream_version for e in recreated] == list(range(1, again.version + 1))
    assert [e.data["message_id"] for e in recreated if e.event_type == "MessageAppended"] == [f"{thread}-0"]
    assert rebuild_projections(cluster.deps.records, cluster.deps.store, verify_only=True).mismatched == []
