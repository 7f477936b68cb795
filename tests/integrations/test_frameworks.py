"""The agent-framework adapters driven by the frameworks' real packages against a real ``om serve``.

Each framework runs a conversation with a model of its own kind, an OpenAI-compatible client pointed at
om's proxy serving the keyless ``om-local/chat`` (on a thread of its own, the model's side); om stores the
conversation through the adapter, in the adapter's thread. The test records every request the framework
sends its model: once the early turns are observed, the request holds om's observations of them instead
of the messages themselves, and the thread holds each message exactly once.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openai import AsyncOpenAI

from om_api.client import AsyncOMClient, OMClient
from om_integrations.langchain import OMMemory
from om_integrations.openai_agents import AppendOnlyHistoryError, OMSession
from testing.conversations import filler_message
from tests.integrations.conftest import KEY_A, Server

pytestmark = pytest.mark.integration

TURNS = 12
WEATHER_TURN = 'call get_weather {"city": "Lisbon"}'


def said(index: int) -> str:
    """A user's turn of about 60 tokens holding a fact the Observer keeps ("Note N: … Dana N times")."""
    text: str = filler_message("turn", index)["parts"][0]["text"]
    return text


class Recorded:
    """The chat-completions requests a framework sent its model."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def add(self, request: httpx.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            self.requests.append(json.loads(request.content))

    async def add_async(self, request: httpx.Request) -> None:
        self.add(request)


def stored(om: Server, thread: str) -> list[dict[str, Any]]:
    with OMClient(om.url, api_key=KEY_A) as client:
        return [e["data"]["message"] for e in client.all_events(thread, types=["MessageAppended"])]


def texts(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message["parts"] if p.get("type") == "text")


def assert_sent_observations_instead_of_early_turns(request: dict[str, Any]) -> None:
    system = "\n".join(str(m["content"]) for m in request["messages"] if m["role"] == "system")
    raw = [str(m.get("content")) for m in request["messages"] if m["role"] != "system"]
    assert "<observations>" in system and "Note 0: user met Dana 0 times" in system
    assert said(0) not in raw, "the first turn is still sent raw although it was observed"


def assert_stored_once(messages: list[dict[str, Any]], user_turns: list[str]) -> None:
    assert len({m["id"] for m in messages}) == len(messages)
    assert [texts(m) for m in messages if m["role"] == "user"] == user_turns


# the Agents SDK would export its traces to OpenAI's servers
set_tracing_disabled(True)


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def test_the_agents_sdk_session_sends_oms_context_and_stores_each_item_once(om: Server) -> None:
    thread = "agents-sdk-1"
    recorded = Recorded()

    async def conversation() -> None:
        http = httpx.AsyncClient(
            event_hooks={"request": [recorded.add_async]}, headers={"X-OM-Thread-Id": f"{thread}-model"}
        )
        client = AsyncOpenAI(base_url=f"{om.url}/v1", api_key=KEY_A, http_client=http)
        model = OpenAIChatCompletionsModel(model="om-local/chat", openai_client=client)
        agent = Agent(name="assistant", instructions="Answer briefly.", model=model, tools=[get_weather])
        async with AsyncOMClient(om.url, api_key=KEY_A) as om_client:
            session = OMSession(thread, om_client, resource_id="user-agents")
            for index in range(TURNS):
                await Runner.run(agent, said(index), session=session)
            result = await Runner.run(agent, WEATHER_TURN, session=session)
            assert "sunny in Lisbon" in str(result.final_output)

            items = await session.get_items()
            assert items[0]["role"] == "system"
            calls = [i for i in items if i.get("type") == "function_call"]
            outputs = [i for i in items if i.get("type") == "function_call_output"]
            assert [c["name"] for c in calls] == ["get_weather"]
            assert [o["call_id"] for o in outputs] == [calls[0]["call_id"]]
            assert len(await session.get_items(limit=2)) == 2 + sum(
                1 for i in items if i.get("role") == "system"
            )

            with pytest.raises(AppendOnlyHistoryError):
                await session.pop_item()
        await http.aclose()

    asyncio.run(asyncio.wait_for(conversation(), timeout=240))

    assert_sent_observations_instead_of_early_turns(recorded.requests[-1])
    messages = stored(om, thread)
    assert_stored_once(messages, [said(i) for i in range(TURNS)] + [WEATHER_TURN])
    # each turn: the user's message and the reply; the tool turn adds the call and its result
    assert len(messages) == 2 * TURNS + 4
    assert sum(1 for m in messages if m["role"] == "tool") == 1

    async def clear() -> list[Any]:
        async with AsyncOMClient(om.url, api_key=KEY_A) as om_client:
            session = OMSession(thread, om_client)
            await session.clear_session()
            await session.clear_session()  # erasing an erased thread is not an error
            return await session.get_items()

    assert asyncio.run(clear()) == []


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _model(om: Server, thread: str, recorded: Recorded) -> ChatOpenAI:
    return ChatOpenAI(
        model="om-local/chat",
        base_url=f"{om.url}/v1",
        api_key=KEY_A,
        default_headers={"X-OM-Thread-Id": f"{thread}-model"},
        http_client=httpx.Client(event_hooks={"request": [recorded.add]}),
        http_async_client=httpx.AsyncClient(event_hooks={"request": [recorded.add_async]}),
    )


def test_the_langchain_middleware_sends_oms_context_and_stores_each_message_once(om: Server) -> None:
    thread = "langchain-1"
    recorded = Recorded()
    with OMClient(om.url, api_key=KEY_A) as client:
        memory = OMMemory(client=client, resource_id="user-langchain")
        agent = create_agent(
            _model(om, thread, recorded), [weather], system_prompt="Answer briefly.", middleware=[memory]
        )
        run = {"configurable": {"thread_id": thread}}
        for index in range(TURNS):
            agent.invoke({"messages": [{"role": "user", "content": said(index)}]}, run)
        answer = agent.invoke(
            {"messages": [{"role": "user", "content": 'call weather {"city": "Lisbon"}'}]}, run
        )
        assert "sunny in Lisbon" in str(answer["messages"][-1].content)

    last = recorded.requests[-1]
    assert last["messages"][0]["role"] == "system" and last["messages"][0]["content"].startswith(
        "Answer briefly."
    )
    assert_sent_observations_instead_of_early_turns(last)
    messages = stored(om, thread)
    assert_stored_once(messages, [said(i) for i in range(TURNS)] + ['call weather {"city": "Lisbon"}'])
    assert len(messages) == 2 * TURNS + 4


def test_the_langchain_middleware_runs_async_on_the_async_client(om: Server) -> None:
    thread = "langchain-async"
    recorded = Recorded()

    async def conversation() -> Any:
        async with AsyncOMClient(om.url, api_key=KEY_A) as client:
            memory = OMMemory(async_client=client, thread_id=thread)
            agent = create_agent(_model(om, thread, recorded), [], middleware=[memory])
            for index in range(3):
                answer = await agent.ainvoke({"messages": [{"role": "user", "content": said(index)}]})
            return answer

    answer = asyncio.run(asyncio.wait_for(conversation(), timeout=120))
    assert said(2)[:40] in str(answer["messages"][-1].content)
    # the third request carries the first two turns back from om, not from the agent's state
    assert [m["content"] for m in recorded.requests[-1]["messages"] if m["role"] == "user"] == [
        said(0),
        said(1),
        said(2),
    ]
    assert_stored_once(stored(om, thread), [said(i) for i in range(3)])
