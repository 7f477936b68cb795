"""Recall paging rules (scenario 35), search, the tool schema, erasure, stored keys, manual cycles,
simulate — over HTTP against Postgres, plus a SQLite variant of the basics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from om_api.auth import create_key, hash_key
from om_core.application.simulate import simulate_thread
from om_core.application.streams import thread_stream_id
from om_core.bootstrap import build_inline
from testing.store import engine_of

from .conftest import AUTH_A, build

THREAD = "recall-thread"
START = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)


def _message(i: int, text: str | None = None) -> dict[str, Any]:
    return {
        "id": f"r{i:03d}",
        "role": "user" if i % 2 == 0 else "assistant",
        "parts": [{"type": "text", "text": text or f"message number {i} about topic {i % 7}"}],
        "createdAt": (START + timedelta(minutes=i)).isoformat(),
    }


@pytest.fixture(scope="module")
def filled(client: TestClient) -> TestClient:
    messages = [_message(i) for i in range(60)]
    messages[30] = _message(30, "The marmalade recipe uses Seville oranges and demerara sugar")
    # a data-only message takes no page slot
    messages.append(
        {
            "id": "r030b",
            "role": "assistant",
            "parts": [{"type": "data-progress", "data": {"p": 1}}],
            "createdAt": (START + timedelta(minutes=30, seconds=30)).isoformat(),
        }
    )
    r = client.post(f"/v1/threads/{THREAD}/messages", json={"messages": messages}, headers=AUTH_A)
    assert r.status_code == 200, r.text
    return client


def _ids(body: dict[str, Any]) -> list[str]:
    return [m["id"] for m in body["messages"]]


def test_recall_paging_rules(filled: TestClient) -> None:
    get = lambda **p: filled.get(f"/v1/threads/{THREAD}/recall", params=p, headers=AUTH_A)  # noqa: E731
    forward = get(cursor="r010", limit=5).json()
    assert _ids(forward) == ["r011", "r012", "r013", "r014", "r015"]
    assert forward["hasNextPage"] is True
    assert get(cursor="r010", limit=5, page=0).json()["page"] == 1  # page 0 ⇒ 1
    assert get(cursor="r010", limit=50).json()["limit"] == 20  # limit 50 ⇒ 20
    assert get(cursor="r010", page=80).json()["page"] == 50  # page 80 ⇒ 50
    backward = get(cursor="r010", limit=4, page=-1).json()
    assert _ids(backward) == ["r006", "r007", "r008", "r009"]  # the limit messages right before the cursor
    assert backward["hasPrevPage"] is True
    assert _ids(get(cursor="r010", limit=4, page=-2).json()) == ["r002", "r003", "r004", "r005"]
    assert _ids(get(cursor="r010", limit=5, page=2).json()) == ["r016", "r017", "r018", "r019", "r020"]
    # the data-only message between r030 and r031 takes no slot
    assert _ids(get(cursor="r029", limit=3).json()) == ["r030", "r031", "r032"]
    end = get(cursor="r055", limit=10).json()
    assert _ids(end) == ["r056", "r057", "r058", "r059"] and end["hasNextPage"] is False
    assert _ids(get(anchor="end", limit=2).json()) == ["r058", "r059"]
    assert _ids(get(limit=2).json()) == ["r000", "r001"]


def test_recall_errors_detail_and_search(filled: TestClient) -> None:
    get = lambda **p: filled.get(f"/v1/threads/{THREAD}/recall", params=p, headers=AUTH_A)  # noqa: E731
    r = get(cursor="r001:r009")
    assert r.status_code == 400 and r.json()["error"]["code"] == "cursor_is_range"
    assert "r001" in r.json()["error"]["details"]["hint"]
    assert get(cursor="nope").status_code == 404
    high = get(cursor="r029", detail="high").json()
    assert len(high["messages"]) == 1 and len(high["messages"][0]["parts"]) == 1 and high["hints"]
    part = get(cursor="r030", part_index=0).json()
    assert "Seville oranges" in part["messages"][0]["parts"][0]["text"]
    assert get(cursor="r030", part_index=5).status_code == 422
    found = get(mode="search", query="seville marmalade").json()
    assert found["threads"][0]["results"][0]["cursor"] == "r030"
    threads = get(mode="threads").json()
    assert [t["id"] for t in threads["threads"]] == [THREAD]
    assert threads["threads"][0]["current"] is True
    tool = filled.get("/v1/tools/recall", headers=AUTH_A).json()
    assert tool["function"]["name"] == "recall"
    assert set(tool["function"]["parameters"]["properties"]) >= {
        "mode",
        "cursor",
        "page",
        "limit",
        "detail",
        "partIndex",
    }


def test_erasure_removes_everything(client: TestClient, pg_app: Any) -> None:
    _, deps, _ = pg_app
    client.post("/v1/threads/to-erase/messages", json={"messages": [_message(1)]}, headers=AUTH_A)
    stream_id = thread_stream_id("alpha", "to-erase")
    assert client.delete("/v1/threads/to-erase", headers=AUTH_A).status_code == 204
    for path in ["", "/context", "/status", "/events", "/observations", "/recall", "/stream"]:
        assert client.get(f"/v1/threads/to-erase{path}", headers=AUTH_A).status_code == 404, path
    assert client.delete("/v1/threads/to-erase", headers=AUTH_A).status_code == 404
    assert "to-erase" not in [
        t["thread_id"] for t in client.get("/v1/threads", headers=AUTH_A).json()["threads"]
    ]
    with engine_of(deps).connect() as conn:
        for table in ("om_events", "om_records", "om_messages", "om_outbox"):
            n = conn.scalar(sa.text(f"select count(*) from {table} where stream_id = :s"), {"s": stream_id})
            assert n == 0, table


def test_stored_keys_and_resource_threads(client: TestClient, pg_app: Any) -> None:
    _, deps, _ = pg_app
    key = create_key(deps.keys, "gamma", "test")
    with engine_of(deps).connect() as conn:
        stored = conn.execute(sa.text("select key_hash, tenant from om_api_keys")).all()
    assert (hash_key(key), "gamma") in [tuple(r) for r in stored]
    assert all(key not in r[0] for r in stored)  # never stored in clear
    headers = {"Authorization": f"Bearer {key}"}
    assert client.put("/v1/threads/g1", json={"resource_id": "res-g"}, headers=headers).status_code == 200
    assert client.put("/v1/threads/g2", json={"resource_id": "res-g"}, headers=headers).status_code == 200
    listed = client.get("/v1/resources/res-g/threads", headers=headers).json()["threads"]
    assert sorted(t["thread_id"] for t in listed) == ["g1", "g2"]
    assert client.get("/v1/resources/res-g/threads", headers=AUTH_A).json()["threads"] == []


def test_manual_observe_and_reflect(client: TestClient) -> None:
    messages = [
        _message(i, f"I like green tea number {i} and hiking in the Alps on day {i}") for i in range(8)
    ]
    client.post("/v1/threads/manual/messages", json={"messages": messages}, headers=AUTH_A)
    observed = client.post("/v1/threads/manual/observe", json={"wait": True}, headers=AUTH_A).json()
    assert observed["outcome"] == "completed"
    assert any(p["type"] == "data-om-observation-start" for p in observed["parts"])
    assert observed["status"]["windows"]["active"]["observations"]["tokens"] > 0
    reflected = client.post("/v1/threads/manual/reflect", headers=AUTH_A).json()
    assert reflected["outcome"] in ("completed", "failed")
    nothing = client.post("/v1/threads/manual/observe", json={"wait": True}, headers=AUTH_A).json()
    assert nothing["outcome"] is None


def test_simulate_under_another_config(client: TestClient, pg_app: Any, tmp_path: Any) -> None:
    _, deps, source_dispatcher = pg_app
    messages = [
        _message(i, f"Fact {i}: my locker code is {1000 + i} and I train on day {i}") for i in range(40)
    ]
    client.post("/v1/threads/sim/messages", json={"messages": messages}, headers=AUTH_A)
    source_dispatcher.drain()
    before = deps.store.stream_version(thread_stream_id("alpha", "sim"))
    scratch, dispatcher = build_inline(
        database_url=f"sqlite:///{tmp_path}/scratch.sqlite3", profile=deps.profile, migrate=True
    )
    scratch.sync_wait_seconds = 0.0
    try:
        report = simulate_thread(
            deps.records,
            deps.store,
            scratch,
            tenant="alpha",
            thread_id="sim",
            config={"observation": {"messageTokens": 400}, "reflection": {"observationTokens": 20_000}},
            source_profile=deps.profile,
            drain=dispatcher.drain,
        ).as_dict()
    finally:
        dispatcher.close()
    assert deps.store.stream_version(thread_stream_id("alpha", "sim")) == before  # untouched
    assert report["simulated"]["messages"] == report["recorded"]["messages"] == 40
    assert report["simulated"]["observer_calls"] >= 1
    # the other budget governs the scratch run: its raw window stays under the new blockAfter (400 × 1.5)
    assert report["simulated"]["unobserved_tokens"] < 600
    assert report["simulated"]["activations"] + report["simulated"]["sync_observations"] >= 1
    assert report["config"]["observation"]["messageTokens"] == 400


def test_sqlite_variant(sqlite_url: str) -> None:
    app, _, dispatcher = build(sqlite_url)
    try:
        with TestClient(app, raise_server_exceptions=False) as c:
            messages = [_message(i) for i in range(10)]
            messages[4] = _message(4, "Seville marmalade again")
            assert (
                c.post("/v1/threads/lite/messages", json={"messages": messages}, headers=AUTH_A).status_code
                == 200
            )
            assert c.get("/v1/threads/lite/context", headers=AUTH_A).json()["version"] >= 10
            hits = c.get(
                "/v1/threads/lite/recall", params={"mode": "search", "query": "marmalade"}, headers=AUTH_A
            )
            assert hits.json()["threads"][0]["results"][0]["cursor"] == "r004"
            assert (
                c.get(
                    "/v1/threads/lite/recall", params={"cursor": "r002", "limit": 2}, headers=AUTH_A
                ).json()["messages"][0]["id"]
                == "r003"
            )
            assert c.delete("/v1/threads/lite", headers=AUTH_A).status_code == 204
    finally:
        dispatcher.close()
