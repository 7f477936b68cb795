"""Working memory kept by the Observer (observation.manageWorkingMemory), end to end on SQLite: the
document is created, updated, carried in the context and readable over HTTP, in both record scopes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from om_core.application.append import append_messages
from om_core.application.context import get_context
from om_core.application.deps import Deps
from om_core.application.repository import load_state, replay_state
from om_core.application.streams import thread_stream_id
from om_core.application.working_memory import read_working_memory
from om_core.bootstrap import build_inline
from om_core.domain.events import ObservationBufferCompleted, SyncObservationCompleted, from_recorded
from om_core.domain.state import RecordState

FILLER = "Tell me more about the weather and the news today, please, in some detail."


def profile(**observation: Any) -> dict[str, Any]:
    return {
        "model": "om-local/extractive",
        "observation": {"messageTokens": 200, "manageWorkingMemory": True, **observation},
    }


def say(deps: Deps, thread: str, index: int, text: str, **extra: Any) -> None:
    message = {"id": f"{thread}-{index}", "role": "user", "content": text}
    append_messages(deps, tenant="a", thread_id=thread, messages=[message], **extra)


def state_of(deps: Deps, stream: str) -> RecordState:
    return load_state(deps.records, deps.store, stream)


def outcomes(deps: Deps, stream: str) -> list[ObservationBufferCompleted | SyncObservationCompleted]:
    events = [from_recorded(r) for r in deps.store.read_stream(stream, after_version=0)]
    return [e for e in events if isinstance(e, ObservationBufferCompleted | SyncObservationCompleted)]


def test_document_created_updated_in_context_and_over_http(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from om_api.app import create_app
    from om_core.settings import ServerSettings

    url = f"sqlite:///{tmp_path / 'om.sqlite3'}"
    deps, dispatcher = build_inline(database_url=url, profile=profile(bufferTokens=False))
    stream = thread_stream_id("a", "t")
    say(deps, "t", 0, "Hi, my name is Alice Moreau. I live in Lisbon and I work as a nurse.")
    for i in range(1, 10):
        say(deps, "t", i, FILLER)
    get_context(deps, tenant="a", thread_id="t")  # a read past messageTokens observes before it returns
    state = state_of(deps, stream)
    assert state.stats.sync_observations >= 1
    first = state.working_memory
    assert first is not None and first.startswith("# User Information")
    assert "- **First Name**: Alice" in first and "Lisbon" in first and "nurse" in first
    written = [e for e in outcomes(deps, stream) if e.working_memory is not None]
    assert written and written[-1].working_memory == first
    assert state.working_memory_cycle_id == written[-1].cycle_id

    window = get_context(deps, tenant="a", thread_id="t")
    assert window.system[-1].endswith(f"<working-memory>\n{first}\n</working-memory>")

    say(deps, "t", 10, "Big news: I moved to Porto last week.")
    for i in range(11, 20):
        say(deps, "t", i, FILLER)
    get_context(deps, tenant="a", thread_id="t")
    state = state_of(deps, stream)
    second = state.working_memory
    assert second is not None and second != first
    assert "Porto" in second and "- **First Name**: Alice" in second and "nurse" in second
    assert state.working_memory_cycle_id != written[-1].cycle_id
    # the fold of the events alone gives the same document as the stored row
    assert replay_state(deps.store, stream).working_memory == second
    assert get_context(deps, tenant="a", thread_id="t").system[-1].count("<working-memory>") == 1

    app = create_app(ServerSettings(database_url=url, api_keys="k=acme"), deps)
    with TestClient(app) as client:
        key = {"Authorization": "Bearer k"}
        # the API tenant is the key's, so the thread is written again under it
        for i, text in enumerate(["My name is Alice. I live in Porto.", *[FILLER] * 9]):
            body = {"messages": [{"id": f"h-{i}", "role": "user", "content": text}]}
            assert client.post("/v1/threads/h/messages", json=body, headers=key).status_code == 200
        assert client.get("/v1/threads/h/context", headers=key).status_code == 200
        answer = client.get("/v1/threads/h/working-memory", headers=key)
        assert answer.status_code == 200
        got = answer.json()
        assert got["enabled"] is True and got["scope"] == "thread" and got["format"] == "markdown"
        assert got["template"].startswith("# User Information")
        assert "Porto" in got["working_memory"] and got["cycle_id"] and got["updated_at"]
        context = client.get("/v1/threads/h/context", headers=key).json()
        assert got["working_memory"] in context["system"][-1]
        assert client.get("/v1/threads/nobody/working-memory", headers=key).status_code == 404
    dispatcher.close()


def test_buffered_chunk_updates_the_document_before_activation(tmp_path: Path) -> None:
    deps, dispatcher = build_inline(database_url=f"sqlite:///{tmp_path / 'om.sqlite3'}", profile=profile())
    stream = thread_stream_id("a", "t")
    say(deps, "t", 0, "Hi, my name is Alice Moreau. I live in Lisbon and I work as a nurse.")
    index = 1
    state = state_of(deps, stream)
    while not state.chunks and index < 30:
        say(deps, "t", index, FILLER)
        index += 1
        state = state_of(deps, stream)
    assert state.chunks and not state.log, "a chunk waits for activation"
    assert state.working_memory is not None and "Alice" in state.working_memory
    # the context already carries it, although the chunk's observations are not in it yet
    assert any("<working-memory>" in s for s in get_context(deps, tenant="a", thread_id="t").system)
    dispatcher.close()


def test_resource_scope_shares_one_document(tmp_path: Path) -> None:
    deps, dispatcher = build_inline(
        database_url=f"sqlite:///{tmp_path / 'om.sqlite3'}", profile={**profile(), "scope": "resource"}
    )
    say(deps, "alpha", 0, "Hi, my name is Alice Moreau. I live in Lisbon.", resource_id="r")
    for i in range(1, 10):
        say(deps, "beta", i, FILLER, resource_id="r")
    get_context(deps, tenant="a", thread_id="beta")
    view = read_working_memory(deps, tenant="a", thread_id="beta")
    assert view.scope == "resource" and view.resource_id == "r"
    assert view.document is not None and "Alice" in view.document
    assert read_working_memory(deps, tenant="a", thread_id="alpha").document == view.document
    dispatcher.close()


def test_off_by_default(tmp_path: Path) -> None:
    deps, dispatcher = build_inline(
        database_url=f"sqlite:///{tmp_path / 'om.sqlite3'}",
        profile={
            "model": "om-local/extractive",
            "observation": {"messageTokens": 200, "bufferTokens": False},
        },
    )
    say(deps, "t", 0, "Hi, my name is Alice Moreau. I live in Lisbon.")
    for i in range(1, 10):
        say(deps, "t", i, FILLER)
    get_context(deps, tenant="a", thread_id="t")
    state = state_of(deps, thread_stream_id("a", "t"))
    assert state.stats.sync_observations >= 1 and state.working_memory is None
    view = read_working_memory(deps, tenant="a", thread_id="t")
    assert (view.enabled, view.document, view.template) == (False, None, None)
    assert not any("<working-memory>" in s for s in get_context(deps, tenant="a", thread_id="t").system)
    dispatcher.close()
