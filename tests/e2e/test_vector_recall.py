"""Recall's search by meaning over HTTP (retrieval ``vector: true``): observation groups are indexed by a task
after each observation, ranked against the query, and point back at the messages they were written from."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from om_api.app import create_app
from om_api.demo.conversation import synthetic_conversation
from om_core.application.deps import Deps
from om_core.application.streams import thread_stream_id
from om_core.bootstrap import build_inline

from .conftest import AUTH_A, PROFILE, make_settings

VECTOR_PROFILE: dict[str, Any] = {**PROFILE, "retrieval": {"vector": True}}


@pytest.fixture(scope="module")
def vector_app(pg_url: str) -> Iterator[tuple[TestClient, Deps]]:
    # the synchronous inline executor: every task, indexing included, has run when a request returns
    deps, dispatcher = build_inline(database_url=pg_url, profile=VECTOR_PROFILE, migrate=True)
    deps.sync_wait_seconds = 0.0
    with TestClient(create_app(make_settings(pg_url), deps), raise_server_exceptions=False) as client:
        yield client, deps
    dispatcher.close()


def converse(client: TestClient, thread: str, resource: str, turns: int, seed: int) -> None:
    assert (
        client.put(f"/v1/threads/{thread}", json={"resource_id": resource}, headers=AUTH_A).status_code == 200
    )
    for turn in synthetic_conversation(turns, seed=seed):
        for message in (turn.user, turn.assistant):
            sent = client.post(f"/v1/threads/{thread}/messages", json={"messages": [message]}, headers=AUTH_A)
            assert sent.status_code == 200, sent.text
        assert client.get(f"/v1/threads/{thread}/context", headers=AUTH_A).status_code == 200


def search(client: TestClient, thread: str, query: str, **params: Any) -> dict[str, Any]:
    found = client.get(
        f"/v1/threads/{thread}/recall", params={"mode": "search", "query": query, **params}, headers=AUTH_A
    )
    assert found.status_code == 200, found.text
    body: dict[str, Any] = found.json()
    return body


def test_search_ranks_observation_groups_by_meaning_and_points_at_their_messages(
    vector_app: tuple[TestClient, Deps],
) -> None:
    client, deps = vector_app
    converse(client, "vec-a", "person-1", 40, seed=5)
    indexed = deps.index.load_indexed_groups("alpha", stream_ids=[thread_stream_id("alpha", "vec-a")])
    assert len(indexed) >= 3, "every observation's groups are indexed"
    assert all(g.model == "om-local/hashing" and g.thread_id == "vec-a" for g in indexed)

    body = search(client, "vec-a", "what is the name of my sister and where does she live", limit=3)
    assert body["engine"] == "vector" and body["topK"] == 3
    (thread,) = body["threads"]
    assert thread["threadId"] == "vec-a" and thread["current"]
    best = thread["results"][0]
    assert "Priya" in best["preview"] and "Lisbon" in best["preview"]
    scores = [r["score"] for r in thread["results"]]
    assert scores == sorted(scores, reverse=True) and 0 < scores[-1] <= scores[0] <= 1
    # the cursor reads back the raw messages the group was written from
    start, _, end = best["range"].partition(":")
    assert best["cursor"] == start and end
    page = client.get(
        "/v1/threads/vec-a/recall", params={"cursor": start, "limit": 20}, headers=AUTH_A
    ).json()
    assert page["messages"], page


def test_search_scope_follows_retrieval_scope_and_erasure_removes_the_index(
    vector_app: tuple[TestClient, Deps],
) -> None:
    client, deps = vector_app
    converse(client, "vec-b", "person-1", 24, seed=9)
    body = search(client, "vec-b", "my dog Biscuit the beagle")
    threads = {t["threadId"] for t in body["threads"]}
    assert "vec-b" in threads and threads <= {"vec-a", "vec-b"}, (
        "retrieval scope resource: the whole resource"
    )
    assert client.delete("/v1/threads/vec-b", headers=AUTH_A).status_code == 204
    assert deps.index.load_indexed_groups("alpha", stream_ids=[thread_stream_id("alpha", "vec-b")]) == []
    after = search(client, "vec-a", "my dog Biscuit the beagle")
    assert all(t["threadId"] != "vec-b" for t in after["threads"])


def test_search_without_a_query_is_refused(vector_app: tuple[TestClient, Deps]) -> None:
    client, _ = vector_app
    refused = client.get("/v1/threads/vec-a/recall", params={"mode": "search"}, headers=AUTH_A)
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "query_required"


def test_reindexing_indexes_observations_recorded_before_vectors_were_on(tmp_path: Any) -> None:
    """`om projections reindex`: groups written under ``retrieval: true`` become searchable once ``vector`` is
    on, and a second run replaces rather than duplicates them."""
    import json
    import os
    import subprocess
    import sys

    from om_core.application.append import append_messages, configure_thread
    from om_core.application.context import get_context

    url = f"sqlite:///{tmp_path / 'om.sqlite3'}"
    deps, dispatcher = build_inline(database_url=url, profile={**PROFILE, "retrieval": True})
    try:
        configure_thread(deps, tenant="alpha", thread_id="old", resource_id="person-2")
        for turn in synthetic_conversation(24, seed=2):
            append_messages(deps, tenant="alpha", thread_id="old", messages=[turn.user, turn.assistant])
            get_context(deps, tenant="alpha", thread_id="old")
        stream = thread_stream_id("alpha", "old")
        assert deps.index.load_indexed_groups("alpha", stream_ids=[stream]) == []
    finally:
        dispatcher.close()
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(VECTOR_PROFILE))
    env = {
        **os.environ,
        "OM_DATABASE_URL": url,
        "OM_PROFILE": str(profile),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    reports = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-m", "om_api.cli", "projections", "reindex"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        reports.append(json.loads(done.stdout))
    assert reports[0] == reports[1] and reports[0]["groups"] >= 2
    deps, dispatcher = build_inline(database_url=url, profile=VECTOR_PROFILE)
    try:
        assert len(deps.index.load_indexed_groups("alpha", stream_ids=[stream])) == reports[0]["groups"]
    finally:
        dispatcher.close()
