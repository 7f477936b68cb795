"""Named memory profiles over HTTP: two agents with their own scope and models in one server, a tenant's
own profiles (private, validated, recorded as events), and what a profile change may not do."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from om_api.app import create_app
from om_core.application.deps import Deps
from om_core.application.projections import rebuild_projections
from om_core.bootstrap import build_inline

from .conftest import AUTH_A, AUTH_B, PROFILE, make_settings

SUPPORT = {
    "model": "om-local/extractive",
    "scope": "resource",
    "observation": {"messageTokens": 300, "bufferTokens": False},
    "reflection": {"observationTokens": 20_000},
}
# another model, and budgets it never reaches here: it is never called, only configured
CODER = {"model": "openai/gpt-4o-mini", "observation": {"messageTokens": 50_000}}
DOCUMENT = {"profiles": {"default": PROFILE, "support": SUPPORT, "coder": CODER}}


@pytest.fixture(scope="module")
def served(pg_url: str) -> Iterator[tuple[TestClient, Deps]]:
    with pytest.MonkeyPatch.context() as env:
        # coder's model needs a key at start-up; no call is made with it
        env.setenv("OPENAI_API_KEY", "sk-test-not-used")
        deps, dispatcher = build_inline(database_url=pg_url, profile=DOCUMENT, migrate=True)
        deps.sync_wait_seconds = 0.0
        app = create_app(make_settings(pg_url), deps)
        with TestClient(app, raise_server_exceptions=False) as client:
            yield client, deps
        dispatcher.close()


def _say(client: TestClient, thread: str, *texts: str, **body: Any) -> None:
    messages = [
        {"id": f"{thread}-{i}", "role": "user" if i % 2 == 0 else "assistant", "content": text}
        for i, text in enumerate(texts)
    ]
    r = client.post(f"/v1/threads/{thread}/messages", json={"messages": messages, **body}, headers=AUTH_A)
    assert r.status_code == 200, r.text


def _context_text(client: TestClient, thread: str) -> str:
    r = client.get(f"/v1/threads/{thread}/context", headers=AUTH_A)
    assert r.status_code == 200, r.text
    return str(r.json())


def _filler(fact: str) -> list[str]:
    return [f"{fact}. " + "We talked about the weather and the trains for a long while. " * 12] * 6


def test_two_agents_in_one_server_each_see_only_their_own_memory(served: tuple[TestClient, Deps]) -> None:
    client, deps = served
    for thread, profile in (("sup-1", "support"), ("sup-2", "support"), ("cod-1", "coder")):
        r = client.put(
            f"/v1/threads/{thread}", json={"profile": profile, "resource_id": "user-7"}, headers=AUTH_A
        )
        assert r.status_code == 200, r.text
        assert r.json()["profile"] == profile
    assert client.get("/v1/threads/sup-1", headers=AUTH_A).json()["models"]["observer"] == [
        "om-local/extractive"
    ]
    assert client.get("/v1/threads/cod-1", headers=AUTH_A).json()["models"]["observer"] == [
        "openai/gpt-4o-mini"
    ]

    _say(client, "sup-1", *_filler("My locker code is 4417"))
    _say(client, "cod-1", "The repository is written in Rust", "Noted: Rust.")
    # the same user under the default profile: a third, separate memory
    _say(client, "def-1", "I like green tea", "Green tea it is.", resource_id="user-7")

    support = client.get("/v1/threads/sup-2/context", headers=AUTH_A).json()
    assert support["status"]["recordId"] == "alpha/resource@support/user-7"
    assert "4417" in str(support), "the support agent shares one resource record across its threads"
    assert support["observation_tokens"] > 0, "the support profile's small budget made the Observer run"
    coder = _context_text(client, "cod-1")
    assert "4417" not in coder and "Rust" in coder
    assert "4417" not in _context_text(client, "def-1") and "Rust" not in _context_text(client, "def-1")

    # recall lists the resource's threads of the caller's own profile only
    listed = client.get("/v1/threads/sup-1/recall", params={"mode": "threads"}, headers=AUTH_A).json()
    assert sorted(t["id"] for t in listed["threads"]) == ["sup-1", "sup-2"]
    listed = client.get("/v1/threads/cod-1/recall", params={"mode": "threads"}, headers=AUTH_A).json()
    assert [t["id"] for t in listed["threads"]] == ["cod-1"]
    found = client.get(
        "/v1/threads/cod-1/recall", params={"mode": "search", "query": "locker"}, headers=AUTH_A
    ).json()
    assert "4417" not in str(found)

    # a thread's overrides are checked against its own profile: resource scope takes none
    r = client.put(
        "/v1/threads/sup-1", json={"config": {"observation": {"messageTokens": 900}}}, headers=AUTH_A
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_config"
    r = client.put(
        "/v1/threads/cod-1", json={"config": {"observation": {"messageTokens": 900}}}, headers=AUTH_A
    )
    assert r.status_code == 200, r.text
    assert rebuild_projections(deps.records, deps.store, verify_only=True).mismatched == []


def test_a_thread_keeps_its_profile_and_its_lineage(served: tuple[TestClient, Deps]) -> None:
    client, _ = served
    _say(client, "keep-1", "hello", "hi", profile="coder")
    assert client.get("/v1/threads/keep-1", headers=AUTH_A).json()["profile"] == "coder"
    # an append naming another profile is refused; naming none, or its own, goes on
    r = client.post(
        "/v1/threads/keep-1/messages",
        json={"messages": [{"id": "x", "role": "user", "content": "x"}], "profile": "support"},
        headers=AUTH_A,
    )
    assert r.status_code == 409 and r.json()["error"]["code"] == "profile_mismatch"
    _say(client, "keep-1", "hello", "hi", "more", profile="coder")
    # between two thread-scoped profiles a thread may move; into resource scope its record would move
    r = client.put("/v1/threads/keep-1", json={"profile": "default"}, headers=AUTH_A)
    assert r.status_code == 200 and r.json()["profile"] == "default"
    r = client.put("/v1/threads/keep-1", json={"profile": "support", "resource_id": "u"}, headers=AUTH_A)
    assert r.status_code == 409 and r.json()["error"]["code"] == "profile_conflict"
    assert "lineage" in r.json()["error"]["message"]
    r = client.put("/v1/threads/keep-2", json={"profile": "nobody"}, headers=AUTH_A)
    assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_profile"
    assert client.get("/v1/threads/keep-2", headers=AUTH_A).status_code == 404


def test_tenant_profiles_are_private_validated_and_recorded(served: tuple[TestClient, Deps]) -> None:
    client, deps = served
    options = {"model": "om-local/extractive", "observation": {"messageTokens": 40_000}}
    r = client.put("/v1/profiles/helper", json=options, headers=AUTH_A)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["source"], body["scope"], body["version"]) == ("tenant", "thread", 1)
    assert body["changes"][0]["by"].startswith("alpha (key ") and body["changes"][0]["options"] == options
    names = [p["name"] for p in client.get("/v1/profiles", headers=AUTH_A).json()["profiles"]]
    assert names == ["default", "coder", "support", "helper"]

    # another tenant sees none of it, and cannot put a thread under it
    assert client.get("/v1/profiles/helper", headers=AUTH_B).status_code == 404
    assert "helper" not in [p["name"] for p in client.get("/v1/profiles", headers=AUTH_B).json()["profiles"]]
    r = client.put("/v1/threads/b-1", json={"profile": "helper"}, headers=AUTH_B)
    assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_profile"

    # a live thread under it, then changes refused before anything is stored
    _say(client, "help-1", "first", "second", profile="helper")
    before = client.get("/v1/threads/help-1/context", headers=AUTH_A).json()
    refused = {
        "bad option": ({"observation": {"messageTokens": -5}}, "observation.messageTokens"),
        "unknown option": ({"observaton": {}}, "observaton"),
        "webhooks": ({"webhooks": [{"url": "http://127.0.0.1:1/x", "events": ["activation"]}]}, "webhooks"),
        "apiBase": (
            {"model": "openai/x", "observation": {"modelSettings": {"apiBase": "http://127.0.0.1:1/v1"}}},
            "observation.modelSettings.apiBase",
        ),
        "missing key": ({"model": "anthropic/claude-3-5-haiku"}, "model"),
    }
    for what, (bad, option) in refused.items():
        r = client.put("/v1/profiles/helper", json=bad, headers=AUTH_A)
        assert r.status_code == 422, (what, r.text)
        assert r.json()["error"]["details"]["problems"][0]["option"] == option, what
    for name, code in (("default", "invalid_profile_name"), ("support", "invalid_profile_name")):
        r = client.put(f"/v1/profiles/{name}", json=options, headers=AUTH_A)
        assert r.status_code == 422 and r.json()["error"]["code"] == code
    assert client.put("/v1/profiles/Bad Name", json=options, headers=AUTH_A).status_code == 422
    assert client.get("/v1/profiles/helper", headers=AUTH_A).json()["version"] == 1
    assert client.get("/v1/threads/help-1/context", headers=AUTH_A).json() == before

    # scope cannot change under live threads, and a profile in use cannot be deleted
    r = client.put("/v1/profiles/helper", json={**options, "scope": "resource"}, headers=AUTH_A)
    assert r.status_code == 409 and r.json()["error"]["details"]["threads"] == ["help-1"], r.text
    r = client.delete("/v1/profiles/helper", headers=AUTH_A)
    assert r.status_code == 409 and r.json()["error"]["code"] == "profile_conflict"
    assert client.put("/v1/profiles/spare", json=options, headers=AUTH_A).status_code == 200
    assert client.delete("/v1/profiles/spare", headers=AUTH_A).status_code == 204
    assert client.get("/v1/profiles/spare", headers=AUTH_A).status_code == 404
    assert client.delete("/v1/profiles/spare", headers=AUTH_A).status_code == 404
    kinds = [e.event_type for e in deps.store.read_stream("alpha/profile/spare")]
    assert kinds == ["ProfileSet", "ProfileDeleted"], "a deletion is recorded, not a removal of history"


def test_a_profile_change_applies_from_the_next_decision_and_time_travel_shows_the_old_one(
    served: tuple[TestClient, Deps],
) -> None:
    client, deps = served
    quiet = {"model": "om-local/extractive", "observation": {"messageTokens": 40_000, "bufferTokens": False}}
    assert client.put("/v1/profiles/tunable", json=quiet, headers=AUTH_A).status_code == 200
    _say(client, "tune-1", *_filler("The meeting room is B12"), profile="tunable")
    first = client.get("/v1/threads/tune-1/context", headers=AUTH_A).json()
    assert first["observation_tokens"] == 0
    assert first["status"]["windows"]["active"]["messages"]["threshold"] == 40_000

    eager = {**quiet, "observation": {"messageTokens": 300, "bufferTokens": False}}
    r = client.put("/v1/profiles/tunable", json=eager, headers=AUTH_A)
    assert r.status_code == 200 and r.json()["version"] == 2 and len(r.json()["changes"]) == 2
    # nothing was rewritten: the stream has the same events until the next decision
    assert (
        client.get("/v1/threads/tune-1/context", headers=AUTH_A, params={"wait": "false"}).json()["version"]
        == first["version"]
    )
    _say(client, "tune-1", *_filler("The meeting room is B12"), "and one more thing")
    now = client.get("/v1/threads/tune-1/context", headers=AUTH_A).json()
    assert (
        now["observation_tokens"] > 0 and now["status"]["windows"]["active"]["messages"]["threshold"] == 300
    )
    then = client.get(
        "/v1/threads/tune-1/context", headers=AUTH_A, params={"at_version": first["version"]}
    ).json()
    assert then["status"]["windows"]["active"]["messages"]["threshold"] == 40_000, "the profile as it was"
    assert rebuild_projections(deps.records, deps.store, verify_only=True).mismatched == []


def test_the_proxy_names_the_profile_by_header(served: tuple[TestClient, Deps]) -> None:
    client, _ = served
    headers = {
        **AUTH_A,
        "X-OM-Thread-Id": "chat-sup",
        "X-OM-Resource-Id": "user-9",
        "X-OM-Profile": "support",
    }
    body = {"model": "om-local/chat", "messages": [{"role": "user", "content": "Where is my parcel?"}]}
    r = client.post("/v1/chat/completions", json=body, headers=headers)
    assert r.status_code == 200, r.text
    assert client.get("/v1/threads/chat-sup", headers=AUTH_A).json()["profile"] == "support"
    r = client.post("/v1/chat/completions", json=body, headers={**headers, "X-OM-Profile": "coder"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "profile_mismatch"
    r = client.post(
        "/v1/chat/completions", json=body, headers={**headers, "X-OM-Thread-Id": "c2", "X-OM-Profile": "x"}
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_profile"
