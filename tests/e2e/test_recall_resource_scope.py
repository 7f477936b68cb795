"""Recall over HTTP when the memory keeps one record per resource, on both backends: the messages the
context holds are the ones recall pages, its cursors resolve and its search finds; another thread of the
resource is browsed with ``thread_id``; what recall refuses has its error code."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from om_api.app import create_app
from om_core.bootstrap import build_inline

from .conftest import AUTH_A, make_settings

PROFILE: dict[str, Any] = {
    "model": "om-local/extractive",
    "scope": "resource",
    "modelRetry": {"maxRetries": 0},
}
AT = "2026-03-02T10:00:00Z"


@pytest.fixture(params=["sqlite", "postgres"])
def client(request: pytest.FixtureRequest, sqlite_url: str, pg_url: str) -> Iterator[TestClient]:
    url = sqlite_url if request.param == "sqlite" else pg_url
    deps, dispatcher = build_inline(database_url=url, profile=PROFILE, migrate=True)
    deps.sync_wait_seconds = 0.0
    app = create_app(make_settings(url), deps, sse_poll_interval=0.05, sse_heartbeat_interval=0.5)
    try:
        with TestClient(app, raise_server_exceptions=False) as test_client:
            yield test_client
    finally:
        dispatcher.close()


def _send(client: TestClient, thread: str, *texts: tuple[str, str]) -> None:
    messages = [{"id": i, "role": "user", "content": t, "createdAt": AT} for i, t in texts]
    body = {"resource_id": "res-http", "messages": messages}
    r = client.post(f"/v1/threads/{thread}/messages", json=body, headers=AUTH_A)
    assert r.status_code == 200, r.text


def test_recall_reads_the_resource_record(client: TestClient) -> None:
    _send(client, "h1", ("h8", "the quince paste recipe"), ("h10", "oven at 160"), ("h9", "stir often"))
    _send(client, "h2", ("k1", "the tram stop is Graça"))
    get = lambda thread, **p: client.get(f"/v1/threads/{thread}/recall", params=p, headers=AUTH_A)  # noqa: E731

    context = client.get("/v1/threads/h1/context", headers=AUTH_A).json()
    assert {"h8", "h10", "h9"} <= {m["id"] for m in context["messages"]}
    page = get("h1").json()
    assert [m["id"] for m in page["messages"]] == ["h8", "h10", "h9"]
    assert (page["count"], page["truncated"], page["tokenOffset"]) == (3, False, 0)
    assert [m["id"] for m in get("h1", cursor="h10").json()["messages"]] == ["h9"]
    found = get("h1", mode="search", query="quince").json()
    assert found["count"] == 1 and found["threads"][0]["results"][0]["cursor"] == "h8"
    assert [m["id"] for m in get("h1", thread_id="h2").json()["messages"]] == ["k1"]
    threads = get("h1", mode="threads").json()
    assert {t["id"] for t in threads["threads"]} == {"h1", "h2"} and threads["hasMore"] is False

    missing = get("h1", cursor="nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "cursor_not_found"
    assert get("h1", thread_id="nowhere").json()["error"]["code"] == "thread_not_found"
