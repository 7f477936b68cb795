"""Named profiles with a real worker process: the worker reads the profile file's named profiles and the
tenant's own from the store, and runs each agent's model work under its own profile."""

from __future__ import annotations

from typing import Any

import pytest

from om_core.application.append import append_messages, configure_thread
from om_core.application.context import read_context
from om_core.application.profile_admin import put_profile
from om_core.application.projections import rebuild_projections
from om_core.domain.events import from_recorded
from testing.conversations import filler_message, memory_profile
from testing.processes import wait_for

from .conftest import TENANT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

# resource scope observes synchronously: the reader waits for the worker's om.sync task
SUPPORT = {
    "scope": "resource",
    "model": "om-local/extractive",
    "observation": {"messageTokens": 500, "bufferTokens": False},
    "reflection": {"observationTokens": 60_000},
}


def test_a_worker_runs_each_agents_work_under_its_own_profile(cluster_factory: Any) -> None:
    cluster = cluster_factory()
    cluster.profile = {"profiles": {"default": cluster.profile, "support": SUPPORT}}
    cluster.worker("w1", concurrency=2)
    deps = cluster.deps
    # the tenant's own profile, written to the store: the worker has never seen it in any file
    tuned = memory_profile(messageTokens=700)
    put_profile(deps, tenant=TENANT, name="tuned", options=tuned, by="test", check_keys=lambda _: None)

    for thread in ("s1", "s2"):
        configure_thread(deps, tenant=TENANT, thread_id=thread, resource_id="u1", profile="support")
    for index in range(12):
        append_messages(deps, tenant=TENANT, thread_id="s1", messages=[filler_message("s1", index)])
    read = read_context(deps, tenant=TENANT, thread_id="s2")
    assert read.stream_id == f"{TENANT}/resource@support/u1"
    assert read.window.observation_tokens > 0, "the worker observed the support agent's resource record"

    buffered = None
    for index in range(40):
        outcome = append_messages(
            deps, tenant=TENANT, thread_id="tuned-1", messages=[filler_message("t", index)], profile="tuned"
        )
        if any(type(e).__name__ == "ObservationBufferRequested" for e in outcome.events):
            buffered = index
            break
    assert buffered is not None
    # the tenant profile's threshold decided when: 700 tokens at 0.2 buffering, not the default's 600
    wait_for(lambda: cluster.events("tuned-1", "ObservationBufferCompleted"), 60, what="a buffered chunk")
    completed = from_recorded(cluster.events("tuned-1", "ObservationBufferCompleted")[0])
    assert completed.usage.model == "om-local/extractive"  # type: ignore[attr-defined]

    support_events = [e.event_type for e in deps.store.read_stream(f"{TENANT}/resource@support/u1")]
    assert "SyncObservationCompleted" in support_events
    assert deps.store.stream_version(f"{TENANT}/resource/u1") == 0, (
        "the default profile's record is untouched"
    )
    assert rebuild_projections(deps.records, deps.store, verify_only=True).mismatched == []
    for process in cluster.processes:
        assert "Traceback" not in process.log(), process.name
