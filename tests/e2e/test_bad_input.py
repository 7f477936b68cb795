"""Bad input gets its documented 4xx, in the error model, and stores nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from om_core.application.deps import Deps
from testing.store import engine_of

from .conftest import AUTH_A, AUTH_B, build

OK_MESSAGE = {"id": "m1", "role": "user", "content": "hello"}


@pytest.fixture(scope="module")
def small(pg_url: str) -> Any:
    app, deps, dispatcher = build(pg_url, max_message_bytes=50_000, max_request_bytes=100_000)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, deps
    dispatcher.close()


def _counts(deps: Deps) -> tuple[int, int]:
    with engine_of(deps).connect() as conn:
        events = conn.scalar(sa.text("select count(*) from om_events"))
        messages = conn.scalar(sa.text("select count(*) from om_messages"))
    return int(events or 0), int(messages or 0)


CASES: list[tuple[str, str, str, dict[str, Any], int, str]] = [
    # name, method, path, request kwargs, status, error code
    (
        "malformed json",
        "POST",
        "/v1/threads/t1/messages",
        {"content": b'{"messages": [', "headers": {**AUTH_A, "content-type": "application/json"}},
        400,
        "malformed_json",
    ),
    (
        "wrong type",
        "POST",
        "/v1/threads/t1/messages",
        {"json": {"messages": "hello"}, "headers": AUTH_A},
        422,
        "validation_error",
    ),
    (
        "no messages",
        "POST",
        "/v1/threads/t1/messages",
        {"json": {"messages": []}, "headers": AUTH_A},
        422,
        "validation_error",
    ),
    (
        "unknown field",
        "POST",
        "/v1/threads/t1/messages",
        {"json": {"messages": [OK_MESSAGE], "bogus": 1}, "headers": AUTH_A},
        422,
        "validation_error",
    ),
    (
        "unknown role",
        "POST",
        "/v1/threads/t1/messages",
        {"json": {"messages": [{"id": "x", "role": "wizard", "content": "hi"}]}, "headers": AUTH_A},
        422,
        "invalid_message",
    ),
    (
        "empty message",
        "POST",
        "/v1/threads/t1/messages",
        {"json": {"messages": [{}]}, "headers": AUTH_A},
        422,
        "invalid_message",
    ),
    (
        "empty content",
        "POST",
        "/v1/threads/t1/messages",
        {"json": {"messages": [{"id": "x", "role": "user", "content": ""}]}, "headers": AUTH_A},
        422,
        "invalid_message",
    ),
    (
        "oversize body",
        "POST",
        "/v1/threads/t1/messages",
        {"json": {"messages": [{"id": "x", "role": "user", "content": "a" * 200_000}]}, "headers": AUTH_A},
        413,
        "payload_too_large",
    ),
    (
        "oversize message",
        "POST",
        "/v1/threads/t1/messages",
        {"json": {"messages": [{"id": "x", "role": "user", "content": "a" * 60_000}]}, "headers": AUTH_A},
        422,
        "invalid_message",
    ),
    (
        "10k thread id",
        "POST",
        "/v1/threads/" + "t" * 10_000 + "/messages",
        {"json": {"messages": [OK_MESSAGE]}, "headers": AUTH_A},
        422,
        "invalid_thread_id",
    ),
    (
        "unicode thread id",
        "POST",
        "/v1/threads/th\u00e9\u00e2tre\U0001f600/messages",
        {"json": {"messages": [OK_MESSAGE]}, "headers": AUTH_A},
        422,
        "invalid_thread_id",
    ),
    (
        "control char thread id",
        "POST",
        "/v1/threads/a%00b%0A/messages",
        {"json": {"messages": [OK_MESSAGE]}, "headers": AUTH_A},
        422,
        "invalid_thread_id",
    ),
    (
        "sql-looking thread id",
        "POST",
        "/v1/threads/x'%3B%20DROP%20TABLE%20om_events%3B--/messages",
        {"json": {"messages": [OK_MESSAGE]}, "headers": AUTH_A},
        422,
        "invalid_thread_id",
    ),
    (
        "sql-looking read",
        "GET",
        "/v1/threads/x%27%20OR%20%271%27%3D%271/context",
        {"headers": AUTH_A},
        422,
        "invalid_thread_id",
    ),
    (
        "NUL in message id",
        "POST",
        "/v1/threads/t1/messages",
        {"json": {"messages": [{"id": "a\u0000b", "role": "user", "content": "hi"}]}, "headers": AUTH_A},
        422,
        "validation_error",
    ),
    (
        "NUL in config key",
        "PUT",
        "/v1/threads/t1",
        {"json": {"config": {"\u0000": True}}, "headers": AUTH_A},
        422,
        "validation_error",
    ),
    (
        "control chars in message id",
        "POST",
        "/v1/threads/t1/messages",
        {"json": {"messages": [{"id": "a\u0007b", "role": "user", "content": "hi"}]}, "headers": AUTH_A},
        422,
        "invalid_message",
    ),
    (
        "bad config",
        "PUT",
        "/v1/threads/t1",
        {"json": {"config": {"observation": {"messageTokens": -5}}}, "headers": AUTH_A},
        422,
        "invalid_config",
    ),
    (
        "an extractor schema no validator can apply",
        "PUT",
        "/v1/threads/t1",
        {
            "json": {
                "config": {
                    "observation": {
                        "extract": [{"name": "p", "instructions": "x", "schema": {"type": "florp"}}]
                    }
                }
            },
            "headers": AUTH_A,
        },
        422,
        "invalid_config",
    ),
    (
        "a working-memory schema with a pattern that does not compile",
        "PUT",
        "/v1/profiles/p1",
        {
            "json": {
                "model": "om-local/extractive",
                "observation": {"manageWorkingMemory": True},
                "workingMemory": {"schema": {"type": "object", "properties": {"a": {"pattern": "(["}}}},
            },
            "headers": AUTH_A,
        },
        422,
        "invalid_config",
    ),
    (
        "an attachment without a url",
        "POST",
        "/v1/threads/t1/messages",
        {
            "json": {
                "messages": [
                    {
                        "id": "a",
                        "role": "user",
                        "content": "see",
                        "experimental_attachments": [{"name": "x.png"}],
                    }
                ]
            },
            "headers": AUTH_A,
        },
        422,
        "invalid_message",
    ),
    (
        "missing key",
        "POST",
        "/v1/threads/t1/messages",
        {"json": {"messages": [OK_MESSAGE]}},
        401,
        "unauthorized",
    ),
    (
        "wrong key",
        "POST",
        "/v1/threads/t1/messages",
        {"json": {"messages": [OK_MESSAGE]}, "headers": {"Authorization": "Bearer nope"}},
        401,
        "unauthorized",
    ),
    (
        "not bearer",
        "GET",
        "/v1/threads/t1/context",
        {"headers": {"Authorization": "Basic a2V5"}},
        401,
        "unauthorized",
    ),
    ("unknown thread", "GET", "/v1/threads/never-made/context", {"headers": AUTH_A}, 404, "thread_not_found"),
    (
        "bad at_version",
        "GET",
        "/v1/threads/never-made/context?at_version=abc",
        {"headers": AUTH_A},
        422,
        "validation_error",
    ),
    (
        "bad format",
        "GET",
        "/v1/threads/never-made/context?format=xml",
        {"headers": AUTH_A},
        422,
        "validation_error",
    ),
    (
        "bad Last-Event-ID",
        "GET",
        "/v1/threads/never-made/stream",
        {"headers": {**AUTH_A, "Last-Event-ID": "abc"}},
        404,
        "thread_not_found",
    ),
    (
        "unknown event type",
        "GET",
        "/v1/threads/never-made/events?types=Nope",
        {"headers": AUTH_A},
        422,
        "unknown_event_type",
    ),
    ("unknown route", "GET", "/v1/nothing", {"headers": AUTH_A}, 404, "not_found"),
    ("wrong method", "PATCH", "/v1/threads/t1", {"headers": AUTH_A}, 405, "method_not_allowed"),
    (
        "json without content-type",
        "POST",
        "/v1/threads/t1/messages",
        {"content": json.dumps({"messages": [OK_MESSAGE]}).encode(), "headers": AUTH_A},
        415,
        "unsupported_media_type",
    ),
    (
        "json sent as text",
        "PUT",
        "/v1/threads/t1",
        {"content": b'{"title": "x"}', "headers": {**AUTH_A, "content-type": "text/plain"}},
        415,
        "unsupported_media_type",
    ),
]


def _estimated_image(tokens: object) -> dict[str, Any]:
    return {
        "type": "image",
        "url": "https://x.test/a.png",
        "providerMetadata": {"mastra": {"tokenEstimate": {"source": "client", "tokens": tokens}}},
    }


def _nested(depth: int) -> bytes:
    return b'{"messages": [{"id": "n", "role": "user", "content": ' + b"[" * depth + b"]" * depth + b"}]}"


JSON = {**AUTH_A, "content-type": "application/json"}
CASES += [
    # a count past the message projection's 32-bit column: a 500 from Postgres before
    *[
        (
            f"token estimate of {tokens}",
            "POST",
            "/v1/threads/t1/messages",
            {
                "json": {"messages": [{"id": "e", "role": "user", "parts": [_estimated_image(tokens)]}]},
                "headers": AUTH_A,
            },
            422,
            "invalid_message",
        )
        for tokens in (2_147_483_648, 1e30)
    ],
    (
        "a message whose estimates add up past the limit",
        "POST",
        "/v1/threads/t1/messages",
        {
            "json": {"messages": [{"id": "e", "role": "user", "parts": [_estimated_image(999_999_999)] * 3}]},
            "headers": AUTH_A,
        },
        422,
        "invalid_message",
    ),
    # nested past what a walker of the body follows: a RecursionError (500) on some routes before
    *[
        (
            f"body nested {depth} deep on {method} {path}",
            method,
            path,
            {"content": _nested(depth), "headers": JSON},
            400,
            "invalid_body",
        )
        for depth in (200, 40_000)
        for method, path in (
            ("POST", "/v1/threads/t1/messages"),
            ("POST", "/v1/threads/t1/turn"),
            ("PUT", "/v1/threads/t1"),
            ("PUT", "/v1/profiles/p1"),
        )
    ],
    # NaN and Infinity, which Python's parser takes and JSON has not: nothing stored can hold them
    *[
        (
            f"{constant} in {method} {path}",
            method,
            path,
            {"content": body.replace(b"@", constant.encode()), "headers": JSON},
            400,
            "invalid_body",
        )
        for constant in ("NaN", "Infinity", "-Infinity")
        for method, path, body in (
            (
                "POST",
                "/v1/threads/t1/messages",
                b'{"messages": [{"id": "n", "role": "user", "content": "hi", "metadata": {"x": @}}]}',
            ),
            ("PUT", "/v1/threads/t1", b'{"metadata": {"score": @}}'),
        )
    ],
]


@pytest.mark.parametrize(
    ("name", "method", "path", "kwargs", "status", "code"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_input(
    small: Any, name: str, method: str, path: str, kwargs: dict[str, Any], status: int, code: str
) -> None:
    client, deps = small
    before = _counts(deps)
    r = client.request(method, path, **kwargs)
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert _counts(deps) == before, "nothing is stored"


def test_other_tenant_sees_nothing(small: Any) -> None:
    client, deps = small
    r = client.post("/v1/threads/private/messages", json={"messages": [OK_MESSAGE]}, headers=AUTH_A)
    assert r.status_code == 200, r.text
    before = _counts(deps)
    for method, path in [
        ("GET", "/v1/threads/private"),
        ("GET", "/v1/threads/private/context"),
        ("GET", "/v1/threads/private/status"),
        ("GET", "/v1/threads/private/events"),
        ("GET", "/v1/threads/private/observations"),
        ("GET", "/v1/threads/private/recall"),
        ("GET", "/v1/threads/private/stream"),
        ("POST", "/v1/threads/private/observe"),
        ("DELETE", "/v1/threads/private"),
    ]:
        r = client.request(method, path, headers=AUTH_B)
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["error"]["code"] == "thread_not_found"
    assert client.get("/v1/threads", headers=AUTH_B).json()["threads"] == []
    assert [t["thread_id"] for t in client.get("/v1/threads", headers=AUTH_A).json()["threads"]] == [
        "private"
    ]
    # a cursor of another tenant's message is unknown too
    client.put("/v1/threads/mine", json={}, headers=AUTH_B)
    r = client.get("/v1/threads/mine/recall", params={"cursor": "m1"}, headers=AUTH_B)
    assert r.status_code == 404
    assert _counts(deps)[0] == before[0] + 1  # only beta's own PUT


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PATCH", "/v1/threads/t1", "DELETE, GET, PUT"),
        ("DELETE", "/v1/threads", "GET"),
        ("GET", "/v1/threads/t1/messages", "POST"),
    ],
)
def test_a_wrong_method_is_told_the_paths_methods(small: Any, method: str, path: str, allowed: str) -> None:
    client, _ = small
    r = client.request(method, path, headers=AUTH_A)
    assert r.status_code == 405
    assert r.headers["allow"] == allowed


def test_a_body_that_is_not_declared_json_is_told_the_content_type_to_send(small: Any) -> None:
    client, _ = small
    r = client.post("/v1/threads/t1/messages", content=json.dumps({"messages": [OK_MESSAGE]}), headers=AUTH_A)
    assert r.status_code == 415
    assert "content-type: application/json" in r.json()["error"]["message"]


def test_time_travel_past_the_head_names_the_current_version(small: Any) -> None:
    client, _ = small
    r = client.post("/v1/threads/travel/messages", json={"messages": [OK_MESSAGE]}, headers=AUTH_A)
    version = r.json()["version"]
    assert client.get(f"/v1/threads/travel/context?at_version={version}", headers=AUTH_A).status_code == 200
    r = client.get(f"/v1/threads/travel/context?at_version={version + 1}", headers=AUTH_A)
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["code"] == "version_out_of_range"
    assert error["details"] == {"at_version": version + 1, "version": version}
    assert f"current version is {version}" in error["message"]


def test_duplicates_and_conflicts(small: Any) -> None:
    client, deps = small
    message = {"id": "dup-1", "role": "user", "content": "same", "createdAt": "2026-01-01T00:00:00Z"}
    first = client.post("/v1/threads/dups/messages", json={"messages": [message]}, headers=AUTH_A)
    again = client.post("/v1/threads/dups/messages", json={"messages": [message]}, headers=AUTH_A)
    assert first.status_code == again.status_code == 200
    assert again.json()["duplicates"] == ["dup-1"] and again.json()["appended"] == []
    before = _counts(deps)
    changed = client.post(
        "/v1/threads/dups/messages", json={"messages": [{**message, "content": "other"}]}, headers=AUTH_A
    )
    assert changed.status_code == 409
    assert changed.json()["error"]["code"] == "message_conflict"
    assert _counts(deps) == before


def test_unicode_text_is_accepted(small: Any) -> None:
    client, _ = small
    text = "naïve café — 日本語 🙂 \u202e"
    r = client.post(
        "/v1/threads/unicode/messages",
        json={"messages": [{"id": "u1", "role": "user", "content": text}]},
        headers=AUTH_A,
    )
    assert r.status_code == 200, r.text
    ctx = client.get("/v1/threads/unicode/context", headers=AUTH_A).json()
    assert json.dumps(ctx["messages"][0]["parts"][0]["text"], ensure_ascii=False) == json.dumps(
        text, ensure_ascii=False
    )


def test_a_tenant_over_its_rate_limit_gets_429_and_stores_nothing(pg_url: str) -> None:
    app, deps, dispatcher = build(pg_url, rate_limit=0.5, rate_limit_burst=2)
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            thread = "rate-limited"
            sent = [
                client.post(
                    f"/v1/threads/{thread}/messages",
                    json={"messages": [{**OK_MESSAGE, "id": f"r{i}"}]},
                    headers=AUTH_A,
                )
                for i in range(3)
            ]
            assert [r.status_code for r in sent] == [200, 200, 429]
            refused = sent[2]
            assert refused.json()["error"]["code"] == "rate_limited"
            assert int(refused.headers["Retry-After"]) >= 1
            assert refused.json()["error"]["details"]["retry_after_s"] > 0
            # another tenant has its own allowance; the refused message was not stored
            assert client.get("/v1/threads", headers=AUTH_B).status_code == 200
            events = client.get(f"/v1/threads/{thread}/events", headers=AUTH_A)
            assert events.status_code == 429
        stored = deps.messages.find_messages(f"alpha/thread/{thread}", ["r0", "r1", "r2"])
        assert sorted(stored) == ["r0", "r1"]
    finally:
        dispatcher.close()


def test_the_python_client_reports_when_to_retry() -> None:
    import httpx

    from om_api.client import OMError, _raise_for

    limited = httpx.Response(
        429,
        headers={"Retry-After": "2"},
        json={"error": {"code": "rate_limited", "message": "slow down", "details": {"retry_after_s": 1.5}}},
    )
    with pytest.raises(OMError) as raised:
        _raise_for(limited)
    assert (raised.value.status, raised.value.code, raised.value.retry_after) == (429, "rate_limited", 2.0)
    assert raised.value.details == {"retry_after_s": 1.5}
    with pytest.raises(OMError) as raised:
        _raise_for(httpx.Response(502, text="bad gateway"))
    assert (raised.value.code, raised.value.retry_after) == ("http_error", None)
