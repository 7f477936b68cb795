"""A long conversation over HTTP against Postgres: appended message by message, the context read before
each model call, observation and reflection running in the background (inline executor on a worker
thread), and the final context equal to a fresh replay of the recorded events."""

from __future__ import annotations

import random
from typing import Any

from fastapi.testclient import TestClient

from om_api.demo.conversation import synthetic_conversation
from om_api.schemas import AppendOut, ContextOut, OpenAIContextOut
from om_core.adapters.inline_dispatcher import InlineDispatcher
from om_core.application.deps import Deps
from om_core.application.projections import replay_context
from om_core.application.streams import thread_stream_id

from .conftest import AUTH_A, PROFILE

THREAD = "long-conversation"


def test_long_conversation_over_http(client: TestClient, pg_app: tuple[Any, Deps, InlineDispatcher]) -> None:
    _, deps, dispatcher = pg_app
    r = client.put(f"/v1/threads/{THREAD}", json={"resource_id": "user-1", "title": "Long"}, headers=AUTH_A)
    assert r.status_code == 200, r.text
    kinds: set[str] = set()
    max_pending = 0
    for turn in synthetic_conversation(60, seed=3):
        r = client.post(f"/v1/threads/{THREAD}/messages", json={"messages": [turn.user]}, headers=AUTH_A)
        assert r.status_code == 200, r.text
        body = r.json()
        # the turn's answers are encoded by hand (om_api/encoding.py): exactly their documented models
        assert AppendOut.model_validate(body).model_dump(mode="json") == body
        assert body["appended"][0]["message_id"] == turn.user["id"]
        assert body["appended"][0]["tokens"] > 0
        assert body["parts"][-1]["type"] == "data-om-status"
        kinds.update(p["type"] for p in body["parts"])
        r = client.get(f"/v1/threads/{THREAD}/context", params={"model": "openai/gpt-5-mini"}, headers=AUTH_A)
        assert r.status_code == 200, r.text
        context = r.json()
        assert ContextOut.model_validate(context).model_dump(mode="json") == context
        kinds.update(p["type"] for p in context["parts"])
        block_after = PROFILE["observation"]["messageTokens"] * PROFILE["observation"]["blockAfter"]
        # a context read never returns a window over blockAfter (docs/semantics.md, Invariants)
        assert context["pending_tokens"] < block_after
        max_pending = max(max_pending, context["pending_tokens"])
        r = client.post(f"/v1/threads/{THREAD}/messages", json={"messages": [turn.assistant]}, headers=AUTH_A)
        assert r.status_code == 200, r.text
    dispatcher.drain()
    final = client.get(f"/v1/threads/{THREAD}/context", headers=AUTH_A).json()
    stats = client.get(f"/v1/threads/{THREAD}/observations", headers=AUTH_A).json()
    assert stats["stats"]["observer_calls"] >= 3
    assert stats["stats"]["buffered_chunks"] >= 1
    assert stats["stats"]["activations"] + stats["stats"]["sync_observations"] >= 1
    assert stats["stats"]["reflector_calls"] >= 1
    assert stats["generation"] >= 1
    assert final["system"], "observations reach the context"
    assert len(final["messages"]) < 120
    # the final context is exactly what a fresh fold of the recorded events gives
    replayed = replay_context(deps.store, thread_stream_id("alpha", THREAD), profile=deps.profile)
    assert final["version"] == replayed["version"]
    assert final["system"] == replayed["system"]
    assert final["continuation"] == replayed["continuation"]
    assert final["messages"] == replayed["messages"]
    # the read's own cost is not part of the record: everything else is the fold's
    assert final["status"].pop("thisRead") == {"observerCalls": 0, "reflectorCalls": 0}
    assert final["status"] == replayed["status"]
    # every user message is stored exactly once: raw in the window, or observed
    events = []
    after = 0
    while True:
        page = client.get(
            f"/v1/threads/{THREAD}/events", params={"after": after, "limit": 500}, headers=AUTH_A
        ).json()
        events.extend(page["events"])
        if page["next_after"] is None:
            break
        after = page["next_after"]
    appended = [e["data"]["message_id"] for e in events if e["type"] == "MessageAppended"]
    assert len(appended) == 120 == len(set(appended))
    assert [e["version"] for e in events] == list(range(1, len(events) + 1))


def test_time_travel_equals_fresh_fold(
    client: TestClient, pg_app: tuple[Any, Deps, InlineDispatcher]
) -> None:
    _, deps, _ = pg_app
    stream_id = thread_stream_id("alpha", THREAD)
    version = deps.store.stream_version(stream_id)
    assert version > 50
    rng = random.Random(11)
    for n in [1, version, *rng.sample(range(2, version), 12)]:
        r = client.get(f"/v1/threads/{THREAD}/context", params={"at_version": n}, headers=AUTH_A)
        assert r.status_code == 200, r.text
        got = r.json()
        expected = replay_context(deps.store, stream_id, to_version=n, profile=deps.profile)
        assert got["version"] == expected["version"] == n
        for key in ("system", "continuation", "messages", "status"):
            assert got[key] == expected[key], (n, key)
    r = client.get(f"/v1/threads/{THREAD}/context", params={"at_version": 0}, headers=AUTH_A)
    assert r.status_code == 422


def test_openai_format_and_observations(client: TestClient) -> None:
    r = client.get(f"/v1/threads/{THREAD}/context", params={"format": "openai"}, headers=AUTH_A)
    assert r.status_code == 200
    assert OpenAIContextOut.model_validate(r.json()).model_dump(mode="json") == r.json()
    messages = r.json()["messages"]
    assert messages[0]["role"] == "system"
    assert {m["role"] for m in messages} <= {"system", "user", "assistant", "tool"}
    obs = client.get(f"/v1/threads/{THREAD}/observations", headers=AUTH_A).json()
    assert obs["log"] and obs["generations"][0]["generation"] == 0
    old = client.get(f"/v1/threads/{THREAD}/observations", params={"generation": 0}, headers=AUTH_A)
    assert old.status_code == 200
    assert old.json()["generation"] == 0
    status = client.get(f"/v1/threads/{THREAD}/status", headers=AUTH_A).json()
    assert status["windows"]["active"]["messages"]["threshold"] > 0
    assert status["threadId"] == THREAD
