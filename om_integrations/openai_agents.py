"""An om-backed ``Session`` for the OpenAI Agents SDK (``pip install 'om[openai-agents]'``).

    from agents import Agent, Runner
    from om_api.client import AsyncOMClient
    from om_integrations.openai_agents import OMSession

    session = OMSession("support-42", AsyncOMClient("http://127.0.0.1:8080", api_key="om_…"))
    result = await Runner.run(agent, "Where does my sister live?", session=session)

The Runner reads the session before each run and adds the run's new items after it. ``add_items`` stores
them in the thread named by the session id (one append per run: the new input, the replies, tool calls
and their outputs, as chat messages); ``get_items`` answers om's context (``GET …/context?format=openai``):
om's memory (its instructions and the observation log) as system items, then the messages not observed
yet, as Responses input items. The history the agent's model is sent therefore stays bounded however long
the conversation runs, and its older part arrives as observations.

The session talks to om over its HTTP API with the Python client (``AsyncOMClient``), so it works against any
om server, as every other client does. Reasoning items and hosted tools' calls (web search, file search,
computer use) are the provider's own state, not conversation: they are not stored. om's history is an event
log that never forgets a message on request: ``pop_item`` is refused (``AppendOnlyHistoryError``), and
``clear_session`` erases the whole thread.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from om_api.client import AsyncOMClient, OMError

try:
    from agents.models.fake_id import FAKE_RESPONSES_ID
except ImportError as error:  # pragma: no cover - exercised by a test that hides the package
    raise ImportError(
        "om_integrations.openai_agents needs the OpenAI Agents SDK: pip install 'om[openai-agents]'"
    ) from error

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings

JSON = dict[str, Any]


class AppendOnlyHistoryError(NotImplementedError):
    """om keeps every message of a thread; a session cannot take one back."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(
            str(p.get("text") or p.get("refusal") or "")
            for p in content
            if isinstance(p, Mapping) and p.get("type") in ("output_text", "input_text", "text", "refusal")
        )
    return ""


def _user_content(content: Any) -> str | list[JSON]:
    if isinstance(content, str):
        return content
    parts: list[JSON] = []
    for part in content or ():
        kind = part.get("type")
        if kind in ("input_text", "text"):
            parts.append({"type": "text", "text": part.get("text", "")})
        elif kind == "input_image" and part.get("image_url"):
            image: JSON = {"url": part["image_url"]}
            if part.get("detail"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        elif kind == "input_file" and part.get("file_data"):
            file: JSON = {"file_data": part["file_data"]}
            if part.get("filename"):
                file["filename"] = part["filename"]
            parts.append({"type": "file", "file": file})
    return parts


def _item_id(item: Mapping[str, Any]) -> str | None:
    """The item's id, the message's idempotency key in om; the SDK's placeholder (items of a
    chat-completions model) is no id."""
    found = item.get("id")
    return str(found) if found and found != FAKE_RESPONSES_ID else None


def chat_messages(items: Sequence[Mapping[str, Any]]) -> list[JSON]:
    """The run's items as chat-completions messages: a function call joins the assistant message before
    it, and its output becomes a tool message."""
    out: list[JSON] = []
    for item in items:
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = str(item.get("role"))
            if role == "assistant":
                message: JSON = {"role": "assistant", "content": _text(item.get("content"))}
            else:
                message = {"role": role, "content": _user_content(item.get("content"))}
            if _item_id(item):
                message["id"] = _item_id(item)
            out.append(message)
        elif kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"},
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                message = {"role": "assistant", "content": None, "tool_calls": [call]}
                if _item_id(item):
                    message["id"] = _item_id(item)
                out.append(message)
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": text})
    return out


def _input_content(content: Any) -> str | list[JSON]:
    if not isinstance(content, list):
        return str(content or "")
    parts: list[JSON] = []
    for part in content:
        if part.get("type") == "text":
            parts.append({"type": "input_text", "text": part.get("text", "")})
        elif part.get("type") == "image_url":
            image = part.get("image_url") or {}
            parts.append(
                {"type": "input_image", "image_url": image.get("url"), "detail": image.get("detail", "auto")}
            )
        elif part.get("type") == "file":
            file = part.get("file") or {}
            parts.append(
                {"type": "input_file", "file_data": file.get("file_data"), "filename": file.get("filename")}
            )
    return parts


def response_items(messages: Sequence[Mapping[str, Any]]) -> list[JSON]:
    """om's context (chat-completions messages) as Responses input items. A tool call is kept only with
    its output and an output only with its call: one half may have left the window into the observations,
    and a model refuses a call without its output."""
    calls = {c["id"] for m in messages for c in m.get("tool_calls") or ()}
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    items: list[JSON] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            if message.get("content"):
                items.append({"role": "assistant", "content": str(message["content"])})
            for call in message.get("tool_calls") or ():
                if call["id"] in answered:
                    function = call.get("function") or {}
                    items.append(
                        {
                            "type": "function_call",
                            "call_id": call["id"],
                            "name": function.get("name"),
                            "arguments": function.get("arguments") or "{}",
                        }
                    )
        elif role == "tool":
            if message.get("tool_call_id") in calls:
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": message["tool_call_id"],
                        "output": message["content"],
                    }
                )
        else:
            items.append({"role": role, "content": _input_content(message.get("content"))})
    return items


class OMSession:
    """The Agents SDK's ``Session`` protocol on an om thread (``session_id`` is the thread id)."""

    def __init__(
        self,
        session_id: str,
        client: AsyncOMClient,
        *,
        resource_id: str | None = None,
        model: str | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        """``resource_id``: the resource (user) a new thread belongs to. ``model``: the model the agent
        calls, for om's token counts of images and files and its prompt-cache idle rules."""
        self.session_id = session_id
        self.client = client
        self.resource_id = resource_id
        self.model = model
        self.session_settings = session_settings

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """om's context as input items; with ``limit``, the memory's system items and the newest ``limit``
        of the others (the memory is what the limit would otherwise cut first)."""
        try:
            context = await self.client.context(self.session_id, model=self.model, format="openai")
        except OMError as error:
            if error.code == "thread_not_found":
                return []
            raise
        items = response_items(context["messages"])
        if limit is not None:
            memory = [i for i in items if i.get("role") == "system"]
            rest = [i for i in items if i.get("role") != "system"]
            items = memory + (rest[-limit:] if limit > 0 else [])
        return cast("list[TResponseInputItem]", items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        messages = chat_messages(cast("list[Mapping[str, Any]]", items))
        if messages:
            await self.client.append(self.session_id, messages, resource_id=self.resource_id)

    async def pop_item(self) -> TResponseInputItem | None:
        raise AppendOnlyHistoryError(
            f"om keeps every message of thread {self.session_id!r} (its history is an event log), so a "
            "session cannot take its last item back; add a correcting message, or erase the whole thread "
            "with clear_session()"
        )

    async def clear_session(self) -> None:
        """Erase the thread: its events, messages and observations."""
        try:
            await self.client.delete_thread(self.session_id)
        except OMError as error:
            if error.code != "thread_not_found":
                raise
