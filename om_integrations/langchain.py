"""om's memory for LangChain agents (``create_agent``), as agent middleware (``pip install 'om[langchain]'``).

    from langchain.agents import create_agent
    from om_api.client import OMClient
    from om_integrations.langchain import OMMemory

    agent = create_agent(model, tools, middleware=[OMMemory(client=OMClient(url, api_key="om_…"))])
    agent.invoke({"messages": [{"role": "user", "content": "hi"}]}, {"configurable": {"thread_id": "t1"}})

Middleware is how LangChain v1 shapes what an agent sends its model (its summarisation and trimming are
middleware too). Before each model call, ``OMMemory`` sends the run's messages to om with its turn
(``POST …/turn?format=openai``: om stores the ones it does not hold, by message id, and answers the context)
and replaces the model request's messages with that context: om's memory (its instructions and the
observation log) after the agent's own system prompt, then the messages not observed yet. The model's
reply is stored as soon as it comes, and at the end of the run whatever is left (a last tool result).

om is the memory, so the agent needs no checkpointer: invoke it with the new message only, naming the
thread in ``configurable.thread_id`` (or ``OMMemory(thread_id=…)``). With a checkpointer the state holds
every earlier message too; om stores each of them once all the same (their ids are LangChain's).

The sync hooks use ``client`` (``OMClient``), the async ones (``ainvoke``, ``astream``) ``async_client``
(``AsyncOMClient``); both talk to om over its HTTP API.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from om_api.client import AsyncOMClient, OMClient

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
    from langchain_core.messages import (
        AnyMessage,
        BaseMessage,
        SystemMessage,
        convert_to_messages,
        convert_to_openai_messages,
    )
    from langgraph.config import get_config
    from langgraph.runtime import Runtime
except ImportError as error:  # pragma: no cover - exercised by a test that hides the package
    raise ImportError("om_integrations.langchain needs LangChain: pip install 'om[langchain]'") from error

JSON = dict[str, Any]


class ThreadRequiredError(ValueError):
    """Neither ``OMMemory(thread_id=…)`` nor the run's ``configurable.thread_id`` names the thread."""


def om_messages(messages: Sequence[BaseMessage]) -> list[JSON]:
    """LangChain messages as chat-completions messages, each keeping its LangChain id as om's message id
    (so a message sent again is stored once)."""
    out: list[JSON] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            continue  # the agent's instructions are its own, sent with every call; not conversation
        (converted,) = convert_to_openai_messages([message])
        if message.id:
            converted["id"] = message.id
        if (
            converted.get("role") == "assistant"
            and converted.get("tool_calls")
            and not converted.get("content")
        ):
            converted["content"] = None
        out.append(converted)
    return out


def _with_memory(request: ModelRequest, context: JSON) -> ModelRequest:
    """The request with om's context as its messages, om's memory joining the agent's system prompt."""
    messages = convert_to_messages(context["messages"])
    memory = [str(m.content) for m in messages if isinstance(m, SystemMessage)]
    # convert_to_messages makes only the message classes AnyMessage names
    rest = cast("list[AnyMessage]", [m for m in messages if not isinstance(m, SystemMessage)])
    own = request.system_message.text if request.system_message is not None else ""
    system = "\n\n".join(part for part in (own, *memory) if part)
    return request.override(messages=rest, system_message=SystemMessage(system) if system else None)


class OMMemory(AgentMiddleware):
    """``create_agent`` middleware sending the model om's context of the thread instead of the state's
    messages, and storing the conversation in om."""

    def __init__(
        self,
        *,
        client: OMClient | None = None,
        async_client: AsyncOMClient | None = None,
        thread_id: str | None = None,
        resource_id: str | None = None,
        model: str | None = None,
    ) -> None:
        """``thread_id``: the thread, when the run's ``configurable.thread_id`` does not name it.
        ``resource_id``: the resource (user) a new thread belongs to. ``model``: the model the agent calls,
        for om's token counts of images and files."""
        super().__init__()
        self.client = client
        self.async_client = async_client
        self.thread_id = thread_id
        self.resource_id = resource_id
        self.model = model

    def _thread(self) -> str:
        configured = (get_config().get("configurable") or {}).get("thread_id")
        thread = configured or self.thread_id
        if not thread:
            raise ThreadRequiredError(
                "name the om thread: invoke with {'configurable': {'thread_id': ...}}, "
                "or OMMemory(thread_id=...)"
            )
        return str(thread)

    def _sync(self) -> OMClient:
        if self.client is None:
            raise TypeError("OMMemory(client=OMClient(...)) is needed to invoke the agent synchronously")
        return self.client

    def _async(self) -> AsyncOMClient:
        if self.async_client is None:
            raise TypeError(
                "OMMemory(async_client=AsyncOMClient(...)) is needed to invoke the agent asynchronously"
            )
        return self.async_client

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        client, thread = self._sync(), self._thread()
        context = client.turn(
            thread,
            om_messages(request.messages),
            resource_id=self.resource_id,
            model=self.model,
            format="openai",
        )
        response = handler(_with_memory(request, context))
        client.append(thread, om_messages(response.result), resource_id=self.resource_id)
        return response

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        client, thread = self._async(), self._thread()
        context = await client.turn(
            thread,
            om_messages(request.messages),
            resource_id=self.resource_id,
            model=self.model,
            format="openai",
        )
        response = await handler(_with_memory(request, context))
        await client.append(thread, om_messages(response.result), resource_id=self.resource_id)
        return response

    def after_agent(self, state: AgentState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        left = om_messages(state["messages"])
        if left:
            self._sync().append(self._thread(), left, resource_id=self.resource_id)
        return None

    async def aafter_agent(self, state: AgentState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        left = om_messages(state["messages"])
        if left:
            await self._async().append(self._thread(), left, resource_id=self.resource_id)
        return None
