"""Resource scope: one record for all threads of a resource, observed synchronously in thread batches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from om_core.application.append import append_messages, configure_thread
from om_core.application.context import get_context
from om_core.application.repository import load_state
from om_core.application.streams import RecordNotFoundError, ResourceRequiredError, resource_stream_id
from om_core.bootstrap import build_inline
from om_core.domain.config import ConfigError
from om_core.domain.transcript import obscure_thread_id

PROFILE: dict[str, Any] = {
    "model": "om-local/extractive",
    "scope": "resource",
    "observation": {"messageTokens": 300, "maxTokensPerBatch": 120},
    "reflection": {"observationTokens": 5_000},
}


def say(thread: str, i: int, text: str) -> dict[str, Any]:
    return {"id": f"{thread}-{i}", "role": "user", "content": text, "createdAt": f"2026-03-02T10:00:{i:02d}Z"}


def test_threads_share_one_record_and_see_each_other(tmp_path: Path) -> None:
    deps, _ = build_inline(database_url=f"sqlite:///{tmp_path / 'om.sqlite3'}", profile=PROFILE)
    append_messages(
        deps,
        tenant="a",
        thread_id="alpha",
        resource_id="r1",
        messages=[say("alpha", 1, "My sister Priya lives in Lisbon.")],
    )
    append_messages(
        deps,
        tenant="a",
        thread_id="beta",
        resource_id="r1",
        messages=[say("beta", 2, "My dog Biscuit is afraid of thunderstorms.")],
    )
    window = get_context(deps, tenant="a", thread_id="alpha")
    assert [m["id"] for m in window.messages] == ["alpha-1"]
    others = "\n".join(window.system)
    assert "Biscuit" in others and "<other-conversation" in others
    assert "beta" not in others  # thread ids are obscured in resource scope
    assert obscure_thread_id("beta") in others


def test_sync_observation_batches_threads_and_keeps_them_apart(tmp_path: Path) -> None:
    deps, _ = build_inline(database_url=f"sqlite:///{tmp_path / 'om.sqlite3'}", profile=PROFILE)
    facts = {
        "alpha": "My sister Priya lives in Lisbon and works as an architect.",
        "beta": "I was born in Porto in 1988 and moved to Turin later.",
        "gamma": "Our project codename is Blue Heron and it ships on March 14.",
    }
    for i in range(6):
        for thread, text in facts.items():
            append_messages(
                deps,
                tenant="a",
                thread_id=thread,
                resource_id="r1",
                messages=[say(thread, i, f"{text} Note {i}.")],
            )
    window = get_context(deps, tenant="a", thread_id="alpha")
    state = load_state(deps.records, deps.store, resource_stream_id("a", "r1"))
    assert state.stats.sync_observations >= 1
    assert state.stats.observer_calls >= 2  # three threads over 120 tokens a batch
    log = state.log_text()
    for thread in facts:
        assert f'<thread id="{obscure_thread_id(thread)}">' in log
        assert f'id="{thread}"' not in log
    assert window.pending_tokens < 300


def test_resource_scope_needs_a_resource_and_takes_no_thread_overrides(tmp_path: Path) -> None:
    deps, _ = build_inline(database_url=f"sqlite:///{tmp_path / 'om.sqlite3'}", profile=PROFILE)
    with pytest.raises(ResourceRequiredError):
        append_messages(deps, tenant="a", thread_id="alpha", messages=[say("alpha", 1, "hello")])
    with pytest.raises(ConfigError):
        configure_thread(deps, tenant="a", thread_id="alpha", config={"observation": {"messageTokens": 900}})
    with pytest.raises(RecordNotFoundError):
        get_context(deps, tenant="a", thread_id="nobody")
    configure_thread(deps, tenant="a", thread_id="alpha", resource_id="r1")
    append_messages(deps, tenant="a", thread_id="alpha", messages=[say("alpha", 1, "hello")])
    assert load_state(deps.records, deps.store, resource_stream_id("a", "r1")).stats.messages == 1


def test_retrieval_mode_wraps_groups_with_their_message_range(tmp_path: Path) -> None:
    profile = {
        "model": "om-local/extractive",
        "retrieval": True,
        "observation": {"messageTokens": 200, "bufferTokens": False},
    }
    deps, _ = build_inline(database_url=f"sqlite:///{tmp_path / 'om.sqlite3'}", profile=profile)
    for i in range(16):
        append_messages(
            deps,
            tenant="a",
            thread_id="t",
            messages=[say("t", i, f"My colleague number {i} is called Person{i} and lives in City{i}.")],
        )
    window = get_context(deps, tenant="a", thread_id="t")
    text = "\n".join(window.system)
    assert "## Group `" in text and "_range: `t-0:" in text
    assert "recall" in window.system[0]


def test_resource_scope_over_http(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from om_api.app import create_app
    from om_core.settings import ServerSettings

    url = f"sqlite:///{tmp_path / 'om.sqlite3'}"
    deps, dispatcher = build_inline(database_url=url, profile=PROFILE)
    app = create_app(ServerSettings(database_url=url, api_keys="k=acme"), deps)
    key = {"Authorization": "Bearer k"}
    with TestClient(app) as client:
        for thread, text in (("alpha", "My sister Priya lives in Lisbon."), ("beta", "My dog is Biscuit.")):
            body = {"resource_id": "r1", "messages": [say(thread, 1, text)]}
            assert client.post(f"/v1/threads/{thread}/messages", json=body, headers=key).status_code == 200
        context = client.get("/v1/threads/alpha/context", headers=key).json()
        assert [m["id"] for m in context["messages"]] == ["alpha-1"]
        assert "Biscuit" in "\n".join(context["system"])
        status = client.get("/v1/threads/beta/status", headers=key).json()
        assert status["windows"]["active"]["messages"]["tokens"] > 0
        events = client.get("/v1/threads/beta/events", headers=key).json()["events"]
        assert {e["data"].get("thread_id") for e in events if e["type"] == "MessageAppended"} == {
            "alpha",
            "beta",
        }
        assert client.get("/v1/threads/nobody/context", headers=key).status_code == 404
    dispatcher.close()
