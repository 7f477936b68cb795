"""In resource scope the record is the resource's, shared by its threads: every status part a thread gets
names that thread (``threadId``), in each answer and on its live stream; and the profile route's refusal of
a bad name is the code the docs give."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from om_api.app import create_app
from om_core.bootstrap import build_inline
from testing.processes import serve_in_thread

from .conftest import AUTH_A, make_settings

PROFILE = {"model": "om-local/extractive", "scope": "resource"}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    url = f"sqlite:///{tmp_path_factory.mktemp('resource-status') / 'om.sqlite3'}"
    deps, dispatcher = build_inline(database_url=url, profile=PROFILE)
    yield create_app(make_settings(url), deps)
    dispatcher.close()
    deps.close()


def _statuses(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p["data"] for p in parts if p["type"] == "data-om-status"]


def test_every_status_names_the_thread_it_is_for(app: Any) -> None:
    with TestClient(app) as client:
        for thread in ("alpha-1", "alpha-2"):
            r = client.put(f"/v1/threads/{thread}", json={"resource_id": "user-1"}, headers=AUTH_A)
            assert r.status_code == 200, r.text
            message = {"id": f"{thread}-m1", "role": "user", "content": f"hello from {thread}"}
            appended = client.post(
                f"/v1/threads/{thread}/messages", json={"messages": [message]}, headers=AUTH_A
            )
            assert appended.json()["status"]["threadId"] == thread
            assert appended.json()["status"]["recordId"] == "alpha/resource/user-1"
            assert [s["threadId"] for s in _statuses(appended.json()["parts"])] == [thread]
            context = client.get(f"/v1/threads/{thread}/context", headers=AUTH_A).json()
            assert context["status"]["threadId"] == thread
            turn = {"messages": [{"id": f"{thread}-m2", "role": "user", "content": "and again"}]}
            turned = client.post(f"/v1/threads/{thread}/turn", json=turn, headers=AUTH_A).json()
            assert {s["threadId"] for s in _statuses(turned["parts"])} == {thread}
            assert client.get(f"/v1/threads/{thread}/status", headers=AUTH_A).json()["threadId"] == thread
            observed = client.post(
                f"/v1/threads/{thread}/observe", json={"wait": True}, headers=AUTH_A
            ).json()
            assert observed["status"]["threadId"] == thread


def test_the_live_stream_of_a_thread_names_it(app: Any) -> None:
    with TestClient(app) as client:
        client.put("/v1/threads/beta-1", json={"resource_id": "user-2"}, headers=AUTH_A)
        message = {"id": "beta-m1", "role": "user", "content": "streamed"}
        client.post("/v1/threads/beta-1/messages", json={"messages": [message]}, headers=AUTH_A)
    with serve_in_thread(app) as base:
        headers = {**AUTH_A, "Last-Event-ID": "0"}
        status = None
        with httpx.stream("GET", f"{base}/v1/threads/beta-1/stream", headers=headers, timeout=30) as r:
            for line in r.iter_lines():
                if line.startswith("data: ") and '"data-om-status"' in line:
                    status = json.loads(line[6:])["data"]
                    break
        assert status is not None and status["threadId"] == "beta-1"


def test_a_bad_profile_name_is_invalid_profile_name(app: Any) -> None:
    with TestClient(app) as client:
        for method in ("get", "put", "delete"):
            r = client.request(method, "/v1/profiles/Not A Name", json={}, headers=AUTH_A)
            assert r.status_code == 422, r.text
            assert r.json()["error"]["code"] == "invalid_profile_name", r.text
