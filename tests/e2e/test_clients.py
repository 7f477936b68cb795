"""The Python clients against a real ``om serve``: every route of the API has a method in ``OMClient`` and
in ``AsyncOMClient``, each method reaches its route with the arguments the route takes, and chat
completions go through the ``openai`` package's own client pointed at om."""

from __future__ import annotations

import asyncio
import inspect
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from om_api.client import AsyncOMClient, OMClient, OMError

from .conftest import SERVER_KEY as KEY
from .conftest import SERVER_PROFILES

pytestmark = pytest.mark.integration

# every (method, route) of the OpenAPI document, and the client method that calls it
ROUTES = {
    ("GET", "/v1/threads"): "list_threads",
    ("PUT", "/v1/threads/{thread_id}"): "put_thread",
    ("GET", "/v1/threads/{thread_id}"): "get_thread",
    ("DELETE", "/v1/threads/{thread_id}"): "delete_thread",
    ("POST", "/v1/threads/{thread_id}/messages"): "append",
    ("GET", "/v1/threads/{thread_id}/context"): "context",
    ("POST", "/v1/threads/{thread_id}/turn"): "turn",
    ("GET", "/v1/threads/{thread_id}/status"): "status",
    ("GET", "/v1/threads/{thread_id}/working-memory"): "working_memory",
    ("GET", "/v1/threads/{thread_id}/events"): "events",
    ("GET", "/v1/threads/{thread_id}/stream"): "stream",
    ("GET", "/v1/threads/{thread_id}/observations"): "observations",
    ("POST", "/v1/threads/{thread_id}/observe"): "observe",
    ("POST", "/v1/threads/{thread_id}/reflect"): "reflect",
    ("GET", "/v1/threads/{thread_id}/recall"): "recall",
    ("GET", "/v1/tools/recall"): "recall_tool",
    ("GET", "/v1/resources/{resource_id}/threads"): "resource_threads",
    ("POST", "/v1/chat/completions"): "openai",
    ("GET", "/v1/models"): "models",
    ("GET", "/v1/profiles"): "profiles",
    ("GET", "/v1/profiles/{profile_name}"): "get_profile",
    ("PUT", "/v1/profiles/{profile_name}"): "put_profile",
    ("DELETE", "/v1/profiles/{profile_name}"): "delete_profile",
    ("GET", "/healthz"): "health",
    ("GET", "/readyz"): "ready",
    ("GET", "/metrics"): "metrics",
}


@pytest.fixture(scope="module")
def server(om_serve: tuple[str, dict[str, str]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The shared server, and the OpenAPI document of the app it runs."""
    from om_api.app import create_app
    from om_core.bootstrap import build_inline
    from om_core.settings import ServerSettings

    base, _ = om_serve
    with tempfile.TemporaryDirectory() as scratch:
        deps, _ = build_inline(database_url=f"sqlite:///{scratch}/schema.sqlite3", profile=SERVER_PROFILES)
        openapi = create_app(ServerSettings(), deps).openapi()
        deps.close()
    yield base, openapi


def test_every_route_has_a_method_in_both_clients(server: tuple[str, dict[str, Any]]) -> None:
    _, openapi = server
    routes = {(method.upper(), path) for path, item in openapi["paths"].items() for method in item}
    assert routes == set(ROUTES), "a route without a client method, or a method for no route"
    for name in set(ROUTES.values()):
        sync, asynchronous = getattr(OMClient, name), getattr(AsyncOMClient, name)
        # the same arguments in both
        assert list(inspect.signature(sync).parameters) == list(inspect.signature(asynchronous).parameters)


def test_every_query_parameter_and_body_field_is_an_argument(server: tuple[str, dict[str, Any]]) -> None:
    """Each route's query parameters and JSON body fields are arguments of its method (recall's are
    passed as keywords, as the tool's are many)."""
    _, openapi = server
    schemas = openapi["components"]["schemas"]
    for (method, path), name in ROUTES.items():
        if name in ("recall", "openai", "put_profile"):
            continue
        operation = openapi["paths"][path][method.lower()]
        wanted = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
        reference = body.get("schema", {}).get("$ref", "")
        if reference:
            wanted |= set(schemas[reference.rsplit("/", 1)[-1]].get("properties", {})) - {"messages", "wait"}
        arguments = set(inspect.signature(getattr(OMClient, name)).parameters)
        assert wanted <= arguments, f"{name}: {sorted(wanted - arguments)}"


def _user(text: str, message_id: str) -> dict[str, str]:
    return {"id": message_id, "role": "user", "content": text}


def test_the_sync_client_covers_the_service(server: tuple[str, dict[str, Any]]) -> None:
    base, _ = server
    with OMClient(base, KEY) as om:
        assert om.health() == {"status": "ok"} and om.ready()["status"] == "ready"
        assert "om_http_requests" in om.metrics()
        thread = om.put_thread("s-1", resource_id="user-1", title="sync", profile="support")
        assert thread["profile"] == "support" and thread["updated_at"]
        assert om.get_thread("s-1")["updated_at"]
        appended = om.append("s-1", [_user("My sister Priya lives in Lisbon.", "m1")], profile="support")
        assert appended["appended"][0]["message_id"] == "m1"
        turned = om.turn(
            "s-1",
            [_user("Where does Priya live?", "m2")],
            profile="support",
            format="openai",
            prompt_cache_retention="24h",
            model="openai/gpt-5-mini",
        )
        assert [m["content"] for m in turned["messages"]][-1] == "Where does Priya live?"
        window = om.context("s-1", prompt_cache_retention="in_memory", at_version=2)
        assert window["version"] == 2
        assert om.status("s-1")["threadId"] == "s-1"
        assert om.working_memory("s-1")["working_memory"] is None
        assert [e["type"] for e in om.all_events("s-1", types=["MessageAppended"])] == ["MessageAppended"] * 2
        assert om.observe("s-1")["outcome"] == "completed"
        assert om.observations("s-1")["log"]
        assert om.reflect("s-1", wait=True)["thread_id"] == "s-1"
        assert om.recall("s-1", mode="messages", thread_id="current", anchor="start")["count"] >= 1
        assert om.recall_tool()["function"]["name"] == "recall"
        for i in range(3):
            om.put_thread(f"s-page-{i}", resource_id="user-2")
        page = om.list_threads(limit=2, offset=1)
        assert len(page) == 2 and all(t["updated_at"] for t in page)
        assert {t["thread_id"] for t in om.resource_threads("user-2", limit=5)} == {
            f"s-page-{i}" for i in range(3)
        }
        assert len(om.resource_threads("user-2", limit=1, offset=2)) == 1
        tenant_profile = om.put_profile("mine", {"model": "om-local/extractive"})
        assert tenant_profile["source"] == "tenant"
        assert om.get_profile("mine")["name"] == "mine"
        assert {"default", "support", "mine"} <= {p["name"] for p in om.profiles()}
        om.delete_profile("mine")
        with pytest.raises(OMError) as refused:
            om.get_profile("mine")
        assert refused.value.code == "profile_not_found"
        with pytest.raises(OMError) as invalid:
            om.put_profile("Not A Name", {})
        assert invalid.value.code == "invalid_profile_name"
        assert "om-local/chat" in {m["id"] for m in om.models()}
        om.delete_thread("s-page-0")
        with pytest.raises(OMError) as gone:
            om.get_thread("s-page-0")
        assert gone.value.status == 404


def test_the_async_client_covers_the_service(server: tuple[str, dict[str, Any]]) -> None:
    base, _ = server

    async def run() -> None:
        async with AsyncOMClient(base, KEY) as om:
            assert (await om.health()) == {"status": "ok"} and (await om.ready())["status"] == "ready"
            assert "om_http_requests" in await om.metrics()
            thread = await om.put_thread("a-1", resource_id="user-3", title="async", profile="support")
            assert thread["profile"] == "support" and thread["updated_at"]
            assert (await om.get_thread("a-1"))["updated_at"]
            await om.append("a-1", [_user("I moved to Porto last spring.", "m1")], profile="support")
            turned = await om.turn(
                "a-1", [_user("Where do I live?", "m2")], profile="support", prompt_cache_retention="24h"
            )
            assert turned["appended"][0]["message_id"] == "m2"
            assert (await om.context("a-1", at_version=2, prompt_cache_retention="in_memory"))["version"] == 2
            assert (await om.status("a-1"))["threadId"] == "a-1"
            assert (await om.working_memory("a-1"))["working_memory"] is None
            types = [e["type"] async for e in om.all_events("a-1", types=["MessageAppended"])]
            assert types == ["MessageAppended"] * 2
            assert (await om.events("a-1", after=0, limit=1))["next_after"] == 1
            assert (await om.observe("a-1"))["outcome"] == "completed"
            assert (await om.observations("a-1"))["log"]
            assert (await om.reflect("a-1"))["thread_id"] == "a-1"
            assert (await om.recall("a-1", mode="messages", thread_id="current"))["count"] >= 1
            assert (await om.recall_tool())["function"]["name"] == "recall"
            for i in range(3):
                await om.put_thread(f"a-page-{i}", resource_id="user-4")
            assert len(await om.list_threads(limit=2, offset=1)) == 2
            assert len(await om.resource_threads("user-4", limit=2, offset=2)) == 1
            await om.put_profile("theirs", {"model": "om-local/extractive"})
            assert (await om.get_profile("theirs"))["source"] == "tenant"
            assert "theirs" in {p["name"] for p in await om.profiles()}
            await om.delete_profile("theirs")
            assert "om-local/chat" in {m["id"] for m in await om.models()}
            await om.delete_thread("a-page-0")
            with pytest.raises(OMError):
                await om.get_thread("a-page-0")
            chat = om.openai("a-chat", resource_id="user-3")
            reply = await chat.chat.completions.create(
                model="om-local/chat", messages=[{"role": "user", "content": "hello from async"}]
            )
            assert "hello from async" in (reply.choices[0].message.content or "")
            await chat.close()

    asyncio.run(run())


def test_chat_completions_through_the_openai_client(server: tuple[str, dict[str, Any]]) -> None:
    """``OMClient.openai`` is the openai package's client; OpenAI's own request parameters
    (prompt_cache_retention, prompt_cache_key, store, safety_identifier) reach om and are accepted."""
    base, _ = server
    with OMClient(base, KEY) as om:
        chat = om.openai("c-1", resource_id="user-5", profile="support")
        first = chat.chat.completions.create(
            model="om-local/chat",
            messages=[{"role": "user", "content": "My cat is called Miso."}],
            prompt_cache_retention="24h",
            prompt_cache_key="c-1",
            store=False,
            safety_identifier="user-5",
        )
        assert "Miso" in (first.choices[0].message.content or "")
        streamed = chat.chat.completions.create(
            model="om-local/chat",
            messages=[{"role": "user", "content": "What is my cat called?"}],
            stream=True,
        )
        assert "cat" in "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
        # both turns and both replies are the thread's, under the profile the client named
        stored = om.get_thread("c-1")
        assert stored["profile"] == "support" and stored["resource_id"] == "user-5"
        roles = [e["data"]["message"]["role"] for e in om.all_events("c-1", types=["MessageAppended"])]
        assert roles == ["user", "assistant", "user", "assistant"]
        # every request carries an Idempotency-Key of its own: the same words sent again are a new turn,
        # not a retry of the last one (which a request without a key answered by the newest reply is)
        for _ in range(2):
            chat.chat.completions.create(model="om-local/chat", messages=[{"role": "user", "content": "yes"}])
        said = [e["data"]["message"] for e in om.all_events("c-1", types=["MessageAppended"])][4:]
        assert [(m["role"], m["parts"][0]["text"] if m["role"] == "user" else "") for m in said] == [
            ("user", "yes"),
            ("assistant", ""),
            ("user", "yes"),
            ("assistant", ""),
        ]
        import openai

        with pytest.raises(openai.BadRequestError) as refused:
            chat.chat.completions.create(
                model="om-local/chat",
                messages=[{"role": "user", "content": "x"}],
                prompt_cache_retention="forever",  # type: ignore[arg-type]
            )
        assert refused.value.code == "invalid_prompt_cache_retention"
        chat.close()


def test_the_openai_helper_keeps_the_callers_own_headers(tmp_path: Path) -> None:
    with OMClient("http://127.0.0.1:1", KEY) as om:
        chat = om.openai("t-9", default_headers={"X-Trace": "1"}, max_retries=0)
        assert chat.base_url.path.rstrip("/") == "/v1" and chat.api_key == KEY
        assert chat.default_headers["X-OM-Thread-Id"] == "t-9" and chat.default_headers["X-Trace"] == "1"
        assert "X-OM-Profile" not in chat.default_headers
        chat.close()
