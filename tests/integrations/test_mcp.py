"""The MCP server driven by the official SDK's own client session against a real ``om serve`` on Postgres:
over streamable HTTP (``/mcp``) and through ``om mcp`` over stdio. A thread with observations is read with
every tool, resource and the prompt; bad arguments are refused by the tools' schemas; a wrong key is
refused; another tenant's thread is not found."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from om_api.client import OMClient
from om_core.application.recall import tool_schema
from testing.conversations import filler_message
from testing.processes import OM
from tests.integrations.conftest import KEY_A, KEY_B, Server

pytestmark = pytest.mark.integration

THREAD = "mcp-notes"
T = TypeVar("T")


@pytest.fixture(scope="module")
def seeded(om: Server) -> str:
    """Tenant alpha's thread with observations: 16 messages, then observed at once."""
    with OMClient(om.url, api_key=KEY_A) as client:
        client.append(
            THREAD, [filler_message("seed", i, "user" if i % 2 == 0 else "assistant") for i in range(16)]
        )
        client.observe(THREAD)
        assert client.observations(THREAD)["log"], "the seeded thread has no observations"
    return THREAD


@asynccontextmanager
async def http_session(om: Server, key: str, **headers: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}", **headers}) as http,
        streamable_http_client(f"{om.url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(scenario(), timeout=120))


def leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    value: dict[str, Any] = result.structured_content
    return value


def refusal(result: Any) -> dict[str, Any]:
    assert result.is_error, result.structured_content
    error: dict[str, Any] = result.structured_content["error"]
    assert result.content[0].text == f"{error['code']}: {error['message']}"
    return error


def test_every_tool_resource_and_the_prompt_read_a_thread_with_observations(om: Server, seeded: str) -> None:
    async def scenario() -> None:
        async with http_session(om, KEY_A, **{"X-OM-Thread-Id": seeded}) as mcp:
            tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
            assert set(tools) == {"recall", "search_memory", "get_observations", "add_message", "get_context"}
            recall_parameters = tool_schema()["function"]["parameters"]
            assert tools["recall"].description == tool_schema()["function"]["description"]
            assert set(tools["recall"].input_schema["properties"]) == {
                *recall_parameters["properties"],
                "thread",
            }
            assert (
                tools["recall"].input_schema["properties"]["mode"] == recall_parameters["properties"]["mode"]
            )

            # recall, as the recall tool answers over HTTP: the thread's raw messages from the start
            page = structured(await mcp.call_tool("recall", {"limit": 5}))
            assert page["mode"] == "messages" and page["threadId"] == seeded
            assert [m["id"] for m in page["messages"]] == [f"seed-{i}" for i in range(5)]
            assert page["hasNextPage"] is True
            backward = structured(await mcp.call_tool("recall", {"cursor": "seed-8", "page": -1, "limit": 2}))
            assert [m["id"] for m in backward["messages"]] == ["seed-6", "seed-7"]
            found = structured(await mcp.call_tool("recall", {"mode": "search", "query": "Dana"}))
            assert found["count"] >= 1

            searched = structured(await mcp.call_tool("search_memory", {"query": "Dana", "limit": 3}))
            assert searched["mode"] == "search" and 1 <= searched["count"] <= 3
            cursor = searched["threads"][0]["results"][0]["cursor"]
            original = structured(await mcp.call_tool("recall", {"cursor": cursor, "partIndex": 0}))
            assert [m["id"] for m in original["messages"]] == [cursor]

            observed = structured(await mcp.call_tool("get_observations", {}))
            assert observed["threadId"] == seeded and "Dana" in observed["observations"]
            first = structured(await mcp.call_tool("get_observations", {"generation": 0}))
            assert first["observations"] == observed["observations"]
            assert refusal(await mcp.call_tool("get_observations", {"generation": 7}))["code"] == (
                "generation_not_found"
            )

            context = structured(await mcp.call_tool("get_context", {}))
            system = "\n".join(m["content"] for m in context["messages"] if m["role"] == "system")
            assert "<observations>" in system and "user met Dana" in system

            # a message stored once, however often the call is made
            note = {"content": "Remember: the launch moved to Friday.", "id": "note-1"}
            stored = structured(await mcp.call_tool("add_message", note))
            assert [s["id"] for s in stored["stored"]] == ["note-1"] and stored["duplicates"] == []
            again = structured(await mcp.call_tool("add_message", note))
            assert again["stored"] == [] and again["duplicates"] == ["note-1"]

            resources = [str(r.uri) for r in (await mcp.list_resources()).resources]
            assert f"om://threads/{seeded}/observations" in resources
            templates = {t.uri_template for t in (await mcp.list_resource_templates()).resource_templates}
            assert "om://threads/{thread}/observations/{generation}" in templates
            log = (await mcp.read_resource(f"om://threads/{seeded}/observations")).contents[0]
            assert log.text == observed["observations"]
            assert (await mcp.read_resource(f"om://threads/{seeded}/observations/0")).contents[
                0
            ].text == log.text
            prompt = await mcp.get_prompt("context", {})
            assert "<observations>" in prompt.messages[0].content.text
            assert prompt.messages[-1].content.text == note["content"]

    run(scenario)
    with OMClient(om.url, api_key=KEY_A) as client:
        ids = [e["data"]["message"]["id"] for e in client.all_events(seeded, types=["MessageAppended"])]
    assert ids.count("note-1") == 1


def test_bad_arguments_are_refused_by_the_schemas_and_the_service_errors_keep_their_codes(
    om: Server, seeded: str
) -> None:
    async def scenario() -> None:
        async with http_session(om, KEY_A) as mcp:
            for arguments in (
                {"thread": seeded, "mode": "everything"},
                {"thread": seeded, "page": "two"},
                {"thread": seeded, "limit": 500},
                {"thread": seeded, "unknown": 1},
                {"thread": "not a valid id"},
            ):
                error = refusal(await mcp.call_tool("recall", arguments))
                assert error["code"] == "validation_error" and error["status"] == 422, arguments
                assert error["details"]["errors"]
            assert (
                refusal(await mcp.call_tool("add_message", {"thread": seeded}))["code"] == "validation_error"
            )
            assert refusal(await mcp.call_tool("recall", {"thread": seeded, "before": "yesterday"}))[
                "code"
            ] == ("validation_error")
            # refused by the recall use case, answered with the API's code
            ranged = refusal(await mcp.call_tool("recall", {"thread": seeded, "cursor": "seed-1:seed-4"}))
            assert (
                ranged["code"] == "cursor_is_range" and ranged["details"]["hint"] == 'recall cursor="seed-1"'
            )
            assert refusal(await mcp.call_tool("search_memory", {"thread": seeded, "query": " "}))[
                "code"
            ] == ("query_required")
            # no thread named, and no X-OM-Thread-Id on this connection
            assert refusal(await mcp.call_tool("get_observations", {}))["code"] == "thread_required"

    run(scenario)


def test_a_client_of_the_stateless_protocol_era_is_served_too(om: Server, seeded: str) -> None:
    """A 2026-07-28 client discovers the server (``server/discover``) instead of the handshake."""

    async def scenario() -> None:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY_A}"}) as http,
            streamable_http_client(f"{om.url}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as mcp,
        ):
            await mcp.discover()
            assert mcp.protocol_version not in (None, "2025-11-25")
            observed = structured(await mcp.call_tool("get_observations", {"thread": seeded}))
            assert "Dana" in observed["observations"]

    run(scenario)


def test_a_wrong_key_is_refused(om: Server) -> None:
    answer = httpx.post(
        f"{om.url}/mcp",
        headers={"Authorization": "Bearer not-a-key", "Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        timeout=10,
    )
    assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"
    assert answer.json()["error"]["code"] == "unauthorized"

    refused: list[BaseException] = []

    async def scenario() -> None:
        try:
            async with http_session(om, "not-a-key"):
                pytest.fail("a session opened with a wrong key")
        except* MCPError as group:
            refused.extend(leaves(group))

    run(scenario)
    # the SDK's transport turns the HTTP 401 into the request's JSON-RPC error
    assert refused and all(isinstance(e, MCPError) for e in refused)


def test_another_tenants_thread_is_not_found(om: Server, seeded: str) -> None:
    async def scenario() -> None:
        async with http_session(om, KEY_B, **{"X-OM-Thread-Id": seeded}) as mcp:
            for tool, arguments in (
                ("recall", {}),
                ("search_memory", {"query": "Dana"}),
                ("get_observations", {}),
                ("get_context", {}),
            ):
                error = refusal(await mcp.call_tool(tool, arguments))
                assert (error["code"], error["status"]) == ("thread_not_found", 404), tool
            with pytest.raises(MCPError) as raised:
                await mcp.read_resource(f"om://threads/{seeded}/observations")
            assert raised.value.error.data["code"] == "thread_not_found"
            assert (await mcp.list_resources()).resources == []

    run(scenario)


def test_om_mcp_serves_a_stdio_client_from_the_running_server(om: Server, seeded: str) -> None:
    env = {**os.environ, "OM_MCP_API_KEY": KEY_A}
    command, *args = OM
    parameters = StdioServerParameters(
        command=command, args=[*args, "mcp", "--url", om.url, "--thread", seeded], env=env
    )

    async def scenario() -> None:
        async with stdio_client(parameters) as (read, write), ClientSession(read, write) as mcp:
            initialized = await mcp.initialize()
            assert initialized.server_info.name == "om"
            assert {t.name for t in (await mcp.list_tools()).tools} >= {"recall", "get_observations"}
            assert (
                structured(await mcp.call_tool("recall", {"mode": "search", "query": "Dana"}))["count"] >= 1
            )
            assert "Dana" in structured(await mcp.call_tool("get_observations", {}))["observations"]
            assert refusal(await mcp.call_tool("get_observations", {"thread": "nobody"}))["code"] == (
                "thread_not_found"
            )

    run(scenario)


def test_om_mcp_with_a_wrong_key_is_one_line(om: Server) -> None:
    result = subprocess.run(
        [*OM, "mcp", "--url", om.url, "--api-key", "not-a-key"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: om at {om.url} refused the key (401): pass --api-key or set OM_MCP_API_KEY"
    )
