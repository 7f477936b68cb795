"""Configuration, model and store trouble answers a documented 4xx/503, never a 500 (issue 9, item 4).

A thread config naming a model without credentials is refused when it is set; a model that fails or answers
nothing at run time follows failurePolicy; a database outage is 503 on every route; and an unexpected error
is a JSON 500 that leaves the keep-alive connection usable.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from om_api.app import create_app
from om_api.auth import create_key
from om_core.application.deps import Deps
from om_core.application.streams import thread_stream_id
from om_core.bootstrap import build_inline
from om_core.domain.envelope import IndexedGroup
from om_core.domain.events import (
    ObservationBufferCompleted,
    SyncObservationCompleted,
    SyncObservationFailed,
    from_recorded,
)
from testing.conversations import filler_message
from testing.postgres import scratch_postgres
from testing.processes import serve_in_thread, wait_for
from testing.store import engine_of

from .conftest import AUTH_A, PG_SERVER, build, make_settings

GOOGLE_KEYS = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY")
CLOUD_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", *GOOGLE_KEYS)
# over blockAfter (1.5 × 1,200 tokens): a waited read must observe synchronously
OVER_BLOCK_AFTER = 24


@pytest.fixture(scope="module")
def app(pg_url: str) -> Iterator[tuple[TestClient, Deps]]:
    # the synchronous inline executor: every background task has run when the request that asked returns
    app, deps, dispatcher = build(pg_url, background=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, deps
    dispatcher.close()


@pytest.fixture
def no_cloud_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CLOUD_KEYS:
        monkeypatch.delenv(name, raising=False)


def _counts(deps: Deps) -> tuple[int, int]:
    with engine_of(deps).connect() as conn:
        events = conn.scalar(sa.text("select count(*) from om_events"))
        messages = conn.scalar(sa.text("select count(*) from om_messages"))
    return int(events or 0), int(messages or 0)


def _fill(client: TestClient, thread: str, count: int = OVER_BLOCK_AFTER) -> list[str]:
    ids = []
    for i in range(count):
        message = filler_message(thread, i, role="user" if i % 2 == 0 else "assistant")
        sent = client.post(f"/v1/threads/{thread}/messages", json={"messages": [message]}, headers=AUTH_A)
        assert sent.status_code == 200, sent.text
        ids.append(message["id"])
    return ids


def _events(deps: Deps, thread: str) -> list[Any]:
    return [from_recorded(r) for r in deps.store.read_stream(thread_stream_id("alpha", thread))]


# --- 1. models without credentials are refused when the config is set ------------------------------------


@pytest.mark.parametrize(
    ("config", "option", "variable"),
    [
        ({"observation": {"model": "openai/gpt-4o-mini"}}, "observation.model", "OPENAI_API_KEY"),
        ({"model": "google/gemini-2.5-flash"}, "model", "GEMINI_API_KEY"),
        ({"reflection": {"model": "default"}}, "reflection.model", "GEMINI_API_KEY"),
        # dropping the profile's model falls back to the default model, which needs Google's key
        ({"model": None}, "model", "GEMINI_API_KEY"),
        (
            {"model": {"upTo": {"4000": "om-local/extractive", "90000": "anthropic/claude-sonnet-4-5"}}},
            "model.upTo.90000",
            "ANTHROPIC_API_KEY",
        ),
        (
            {"retrieval": {"vector": True, "embedder": "openai/text-embedding-3-small"}},
            "retrieval.embedder",
            "OPENAI_API_KEY",
        ),
    ],
    ids=["observation model", "top-level model", "default model", "model removed", "tier", "embedder"],
)
def test_a_model_without_credentials_is_refused_when_the_config_is_set(
    app: tuple[TestClient, Deps], no_cloud_keys: None, config: dict[str, Any], option: str, variable: str
) -> None:
    client, deps = app
    assert client.put("/v1/threads/keyless", json={"title": "before"}, headers=AUTH_A).status_code == 200
    before = _counts(deps)
    r = client.put("/v1/threads/keyless", json={"title": "after", "config": config}, headers=AUTH_A)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_config"
    assert [p["option"] for p in error["details"]["problems"]] == [option]
    assert variable in error["details"]["problems"][0]["rule"] and variable in error["message"]
    assert _counts(deps) == before, "nothing is stored"
    assert client.get("/v1/threads/keyless", headers=AUTH_A).json()["title"] == "before"


def test_a_model_with_its_key_set_is_accepted(
    app: tuple[TestClient, Deps], no_cloud_keys: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = app
    monkeypatch.setenv("OPENAI_API_KEY", "sk-set-for-the-check")
    config = {"observation": {"model": "openai/gpt-4o-mini"}}
    r = client.put("/v1/threads/keyed", json={"config": config}, headers=AUTH_A)
    assert r.status_code == 200, r.text
    assert r.json()["config"] == config


def test_a_stored_model_whose_key_went_away_fails_the_read_with_503(
    app: tuple[TestClient, Deps], no_cloud_keys: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a config accepted while the key was set (or stored before the check existed)
    client, deps = app
    monkeypatch.setenv("OPENAI_API_KEY", "sk-set-for-the-check")
    config = {"observation": {"model": "openai/gpt-4o-mini"}}
    assert client.put("/v1/threads/key-gone", json={"config": config}, headers=AUTH_A).status_code == 200
    monkeypatch.delenv("OPENAI_API_KEY")
    ids = _fill(client, "key-gone")
    r = client.get("/v1/threads/key-gone/context", headers=AUTH_A)
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "observation_failed"
    assert int(r.headers["Retry-After"]) >= 1
    failed = [e for e in _events(deps, "key-gone") if isinstance(e, SyncObservationFailed)]
    assert failed and "OPENAI_API_KEY" in failed[-1].error
    window = client.get("/v1/threads/key-gone/context?wait=false", headers=AUTH_A).json()
    assert [m["id"] for m in window["messages"]] == ids, "nothing was lost"


def test_a_search_whose_embedder_key_went_away_is_503(
    app: tuple[TestClient, Deps], no_cloud_keys: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, deps = app
    embedder = "openai/text-embedding-3-small"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-set-for-the-check")
    config = {"retrieval": {"vector": True, "embedder": embedder}}
    assert client.put("/v1/threads/search-gone", json={"config": config}, headers=AUTH_A).status_code == 200
    monkeypatch.delenv("OPENAI_API_KEY")
    stream = thread_stream_id("alpha", "search-gone")
    # a group indexed while the key was set
    source = deps.store.read_stream(stream)[0]
    group = IndexedGroup(
        stream,
        "g1",
        "alpha",
        "search-gone",
        None,
        "m1",
        "m1",
        "Priya lives in Lisbon",
        "2026-03-02T09:00:00Z",
        embedder,
        [1.0, 0.0],
    )
    deps.index.upsert_indexed_groups([group], source_event_id=source.event_id)
    r = client.get(
        "/v1/threads/search-gone/recall", params={"mode": "search", "query": "Lisbon"}, headers=AUTH_A
    )
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "model_unavailable"
    assert "OPENAI_API_KEY" in r.json()["error"]["message"]
    assert int(r.headers["Retry-After"]) >= 1


# --- 2. an Observer input over every ModelByInputTokens tier ---------------------------------------------


def test_an_input_over_every_tier_is_observed_by_the_largest_tier(app: tuple[TestClient, Deps]) -> None:
    client, deps = app
    # every Observer input here is over 200 tokens: the 50-token tier (an embedder) is never called
    config = {"model": {"upTo": {"50": "om-local/hashing", "200": "om-local/extractive"}}}
    assert client.put("/v1/threads/tiers", json={"config": config}, headers=AUTH_A).status_code == 200
    _fill(client, "tiers")
    r = client.get("/v1/threads/tiers/context", headers=AUTH_A)
    assert r.status_code == 200, r.text
    observed = [
        e
        for e in _events(deps, "tiers")
        if isinstance(e, ObservationBufferCompleted | SyncObservationCompleted)
    ]
    assert observed and all(e.usage.model == "om-local/extractive" for e in observed)
    assert all(e.observations.strip() for e in observed)
    assert client.get("/v1/threads/tiers/observations", headers=AUTH_A).json()["log"] != []


# --- 3. resource scope without a resource id -------------------------------------------------------------


@pytest.fixture(scope="module")
def resource_scope(pg_url: str) -> Iterator[tuple[TestClient, Deps]]:
    deps, dispatcher = build_inline(
        database_url=pg_url, profile={"model": "om-local/extractive", "scope": "resource"}
    )
    deps.sync_wait_seconds = 0.0
    with TestClient(create_app(make_settings(pg_url), deps), raise_server_exceptions=False) as client:
        yield client, deps
    dispatcher.close()


def test_a_resource_scope_append_without_resource_id_is_422(resource_scope: tuple[TestClient, Deps]) -> None:
    client, deps = resource_scope
    before = _counts(deps)
    message = {"id": "m1", "role": "user", "content": "My sister Priya lives in Lisbon."}
    r = client.post("/v1/threads/orphan/messages", json={"messages": [message]}, headers=AUTH_A)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "resource_required"
    assert error["details"] == {"thread_id": "orphan"}
    assert "resource_id" in error["message"]
    assert _counts(deps) == before, "nothing is stored"
    # once the thread names its resource, the same append is accepted
    assert client.put("/v1/threads/orphan", json={"resource_id": "r1"}, headers=AUTH_A).status_code == 200
    r = client.post("/v1/threads/orphan/messages", json={"messages": [message]}, headers=AUTH_A)
    assert r.status_code == 200, r.text


# --- 6, 7. a failing or empty Observer follows failurePolicy ---------------------------------------------


@pytest.mark.parametrize(
    ("om_local", "error"),
    [({"errorRate": 1.0}, "injected transient failure"), ({"output": "empty"}, "no observations")],
    ids=["model error", "empty answer"],
)
def test_a_failing_observer_answers_503_and_keeps_every_message(
    app: tuple[TestClient, Deps], om_local: dict[str, Any], error: str
) -> None:
    client, deps = app
    thread = f"failing-{next(iter(om_local))}"
    config = {"observation": {"providerOptions": {"omLocal": om_local}}, "modelRetry": {"maxRetries": 0}}
    assert client.put(f"/v1/threads/{thread}", json={"config": config}, headers=AUTH_A).status_code == 200
    ids = _fill(client, thread)
    r = client.get(f"/v1/threads/{thread}/context", headers=AUTH_A)
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "observation_failed"
    assert int(r.headers["Retry-After"]) >= 1
    events = _events(deps, thread)
    assert not [e for e in events if isinstance(e, SyncObservationCompleted)], "no commit drops messages"
    failed = [e for e in events if isinstance(e, SyncObservationFailed)]
    assert failed and error in failed[-1].error
    assert client.get(f"/v1/threads/{thread}/observations", headers=AUTH_A).json()["log"] == []
    window = client.get(f"/v1/threads/{thread}/context?wait=false", headers=AUTH_A).json()
    assert [m["id"] for m in window["messages"]] == ids, "every message is still in the window"
    # the model recovers: the next read observes the kept messages, each exactly once
    healthy = {"observation": {"providerOptions": {"omLocal": {}}}}
    assert client.put(f"/v1/threads/{thread}", json={"config": healthy}, headers=AUTH_A).status_code == 200
    r = client.get(f"/v1/threads/{thread}/context", headers=AUTH_A)
    assert r.status_code == 200, r.text
    covered = [
        message_id
        for e in _events(deps, thread)
        if isinstance(e, SyncObservationCompleted)
        for message_id in e.message_ids
    ]
    assert sorted(covered + [m["id"] for m in r.json()["messages"]]) == sorted(ids)
    assert client.get(f"/v1/threads/{thread}/observations", headers=AUTH_A).json()["log"] != []


def test_failure_policy_continue_returns_the_window_with_a_warning(app: tuple[TestClient, Deps]) -> None:
    client, _ = app
    config = {
        "observation": {"providerOptions": {"omLocal": {"output": "empty"}}},
        "failurePolicy": "continue",
    }
    assert client.put("/v1/threads/continue", json={"config": config}, headers=AUTH_A).status_code == 200
    ids = _fill(client, "continue")
    r = client.get("/v1/threads/continue/context", headers=AUTH_A)
    assert r.status_code == 200, r.text
    assert [m["id"] for m in r.json()["messages"]] == ids
    assert any("failurePolicy: continue" in w for w in r.json()["warnings"])


# --- 4. the database down ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def outage_db() -> Iterator[str]:
    with scratch_postgres(prefix="om_e2e") as url:
        yield url


def _set_connections(url: str, allowed: bool) -> None:
    name = sa.make_url(url).database
    with psycopg.connect(PG_SERVER, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {"true" if allowed else "false"}')
        if not allowed:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> "
                "pg_backend_pid()",
                (name,),
            )


def _v1_requests(app: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """One well-formed request for every /v1 operation of the OpenAPI document."""
    requests = []
    for template, operations in app.openapi()["paths"].items():
        if not template.startswith("/v1/"):
            continue
        path = (
            template.replace("{thread_id}", "down")
            .replace("{resource_id}", "r1")
            .replace("{profile_name}", "p1")
        )
        for method in operations:
            body: dict[str, Any] = {}
            if path.endswith(("/messages", "/turn")):
                body = {"json": {"messages": [{"id": "x", "role": "user", "content": "hello"}]}}
            elif path == "/v1/chat/completions":
                message = {"role": "user", "content": "hello"}
                body = {
                    "json": {
                        "model": "om-local/chat",
                        "messages": [message],
                        "metadata": {"om_thread_id": "down"},
                    }
                }
            elif method == "put" and path.startswith("/v1/profiles/"):
                body = {"json": {"model": "om-local/extractive"}}
            elif method == "put":
                body = {"json": {"title": "t"}}
            requests.append((method.upper(), path, body))
    return requests


def test_the_database_down_is_503_store_unavailable_on_every_route(outage_db: str) -> None:
    app, deps, dispatcher = build(outage_db, background=False)
    stored_key = create_key(deps.keys, "alpha")
    requests = _v1_requests(app)
    assert len(requests) >= 14
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            assert client.put("/v1/threads/down", json={}, headers=AUTH_A).status_code == 200
            _set_connections(outage_db, allowed=False)
            try:
                # a stored key is looked up in the database (it was never used, so it is not cached)
                for headers in ({"Authorization": f"Bearer {stored_key}"}, AUTH_A):
                    for method, path, kwargs in requests:
                        r = client.request(method, path, headers=headers, **kwargs)
                        if path in ("/v1/tools/recall", "/v1/models") and headers is AUTH_A:
                            assert r.status_code == 200, r.text  # needs no database
                            continue
                        assert r.status_code == 503, (method, path, r.status_code, r.text)
                        assert r.json()["error"]["code"] == "store_unavailable", (method, path)
                        assert int(r.headers["Retry-After"]) >= 1
            finally:
                _set_connections(outage_db, allowed=True)
            # back to normal once the database is (a connection the outage killed may cost one more 503)
            wait_for(
                lambda: (
                    client.get(
                        "/v1/threads/down", headers={"Authorization": f"Bearer {stored_key}"}
                    ).status_code
                    == 200
                ),
                timeout=10,
                what="the API to recover",
            )
    finally:
        dispatcher.close()
        deps.close()


# --- 5. an unexpected error keeps the connection ---------------------------------------------------------


@pytest.fixture
def live_server(pg_url: str) -> Iterator[str]:
    app, _, dispatcher = build(pg_url, background=False)

    def broken() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/v1/broken", broken, methods=["GET"])
    try:
        with serve_in_thread(app, log_level="critical") as base:
            yield base
    finally:
        dispatcher.close()


def _local_port(response: httpx.Response) -> int:
    return int(response.extensions["network_stream"].get_extra_info("client_addr")[1])


def test_an_unexpected_error_is_a_json_500_and_the_connection_stays_usable(live_server: str) -> None:
    with httpx.Client(base_url=live_server, headers=AUTH_A, timeout=10) as client:
        for _ in range(3):
            broken = client.get("/v1/broken")
            assert broken.status_code == 500
            assert broken.json() == {
                "error": {
                    "code": "internal_error",
                    "message": "internal error; it has been logged",
                    "details": {},
                }
            }
            assert broken.headers.get("connection", "").lower() != "close"
            after = client.get("/healthz")
            assert after.status_code == 200
            assert _local_port(after) == _local_port(broken), "the same keep-alive connection"


NO_BUFFERING = {"bufferTokens": False, "blockAfter": None}


@pytest.mark.parametrize(
    ("buffering", "limit"),
    [
        ({}, "the blockAfter limit"),
        ({"observation": NO_BUFFERING, "reflection": {"blockAfter": None}}, "the messageTokens limit"),
    ],
)
def test_a_failed_read_names_the_limit_it_waited_for(
    app: tuple[TestClient, Deps],
    no_cloud_keys: None,
    monkeypatch: pytest.MonkeyPatch,
    buffering: dict[str, Any],
    limit: str,
) -> None:
    """Without buffering a read waits for messageTokens itself: the refusal says so, not blockAfter."""
    client, _ = app
    thread = f"limit-{bool(buffering)}"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-set-for-the-check")
    observation = {"model": "openai/gpt-4o-mini", **buffering.get("observation", {})}
    config = {**buffering, "observation": observation}
    r = client.put(f"/v1/threads/{thread}", json={"config": config}, headers=AUTH_A)
    assert r.status_code == 200, r.text
    monkeypatch.delenv("OPENAI_API_KEY")
    _fill(client, thread)
    r = client.get(f"/v1/threads/{thread}/context", headers=AUTH_A)
    assert r.status_code == 503, r.text
    assert limit in r.json()["error"]["message"]
