"""End to end over HTTP with a real `celery worker` process: the API appends and reads, the worker observes.

The API's Deps publish to Redis through the Celery dispatcher, exactly as `om serve` does with a broker.
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from om_api.app import create_app
from om_api.demo.conversation import synthetic_conversation
from om_core.application.projections import replay_context
from om_core.application.repository import load_state
from om_core.application.streams import thread_stream_id
from testing.processes import wait_for

KEY = {"Authorization": "Bearer e2e-key"}


def test_long_conversation_over_http_with_a_worker_process(cluster_factory: Any) -> None:
    cluster = cluster_factory()
    # the worker also indexes each observation's groups (a task of its own on om.maintenance)
    cluster.profile["retrieval"] = {"vector": True}
    cluster.worker("w1")
    settings = cluster.settings().model_copy(update={"api_keys": {"e2e-key": "acme"}})
    app = create_app(settings, cluster.deps)
    stream = thread_stream_id("acme", "conv")
    block_after = 600 * 1.5
    with TestClient(app) as client:
        assert client.put("/v1/threads/conv", json={"resource_id": "u1"}, headers=KEY).status_code == 200
        for turn in synthetic_conversation(40, seed=11):
            r = client.post("/v1/threads/conv/messages", json={"messages": [turn.user]}, headers=KEY)
            assert r.status_code == 200, r.text
            r = client.get("/v1/threads/conv/context", headers=KEY)
            assert r.status_code == 200, r.text
            assert r.json()["pending_tokens"] < block_after
            r = client.post("/v1/threads/conv/messages", json={"messages": [turn.assistant]}, headers=KEY)
            assert r.status_code == 200, r.text

        def settled() -> bool | None:
            state = load_state(cluster.deps.records, cluster.deps.store, stream)
            idle = state.buffer_in_flight is None and state.sync_in_flight is None
            return (idle and state.reflection_in_flight is None) or None

        wait_for(settled, timeout=60, what="background work to finish")
        state = load_state(cluster.deps.records, cluster.deps.store, stream)
        assert state.stats.buffered_chunks >= 1 and state.stats.activations >= 1
        final = client.get("/v1/threads/conv/context", headers=KEY).json()
        replayed = replay_context(cluster.deps.store, stream, profile=cluster.deps.profile)
        assert final["version"] == replayed["version"]
        assert final["system"] == replayed["system"] and final["messages"] == replayed["messages"]

        observed = state.stats.buffered_chunks + state.stats.sync_observations
        wait_for(
            lambda: (
                len(cluster.deps.index.load_indexed_groups("acme", stream_ids=[stream])) >= observed or None
            ),
            timeout=60,
            what="the worker to index every observation's groups",
        )
        found = client.get(
            "/v1/threads/conv/recall",
            params={"mode": "search", "query": "my sister Priya who lives in Lisbon"},
            headers=KEY,
        ).json()
        assert found["engine"] == "vector"
        # the local hashing embedder ranks by shared words: the fact is among the best few groups
        previews = [r["preview"] for r in found["threads"][0]["results"][:3]]
        assert any("Priya" in p for p in previews), previews
