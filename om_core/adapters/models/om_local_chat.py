"""``om-local/chat``: a deterministic, keyless chat model for the OpenAI-compatible proxy's tests and demo.

It answers from what it was sent, so a test can see what the proxy put in the prompt: it quotes the latest
user message and lists the observation lines of om's memory that share a word with it. Given tools, it calls
one when the latest user message says ``call <tool>`` (optionally followed by a JSON object of arguments),
or when ``tool_choice`` demands a call; after a tool result it reports the result. It streams in small
chunks, a tool call's arguments split in two, as providers do. No latency, no randomness.

Imports litellm (its response types); the ``om-local`` handler (``om_local_llm``) serves it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from litellm.types.llms.openai import ChatCompletionToolCallChunk
from litellm.types.utils import (
    ChatCompletionMessageToolCall,
    Function,
    GenericStreamingChunk,
    ModelResponse,
    Usage,
)

from om_core.adapters.models.model_ids import OM_LOCAL_PROVIDER

CHAT_MODEL = "chat"
FULL_NAME = f"{OM_LOCAL_PROVIDER}/{CHAT_MODEL}"
QUOTE_MAX_CHARS = 200
FACTS_SHOWN = 3
# what every answer of this model that mentions memory says: an observation line holding it records one
_OWN_ANSWER = "observations I remember:"
WORDS_PER_CHUNK = 4

_OBSERVATIONS_OPEN = "<observations>"
_OBSERVATIONS_CLOSE = "</observations>"
_OBSERVATION_LINE = re.compile(r"^\s*[*-]\s*(?:🔴|🟡|🟢|✅)?\s*(?:\(\d{1,2}:\d{2}\)\s*)?(.+?)\s*$")
_WORD = re.compile(r"[A-Za-z0-9À-ÿ]{4,}")
_CALL = re.compile(r"\bcall\s+([A-Za-z0-9_-]{1,64})", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ChatReply:
    text: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def finish_reason(self) -> Literal["tool_calls", "stop"]:
        return "tool_calls" if self.tool_calls else "stop"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def observation_lines(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The observation lines the prompt's system messages hold, between om's ``<observations>`` tags."""
    lines: list[str] = []
    inside = False
    for message in messages:
        if message.get("role") not in ("system", "developer"):
            continue
        for line in _text(message.get("content")).splitlines():
            stripped = line.strip()
            if stripped == _OBSERVATIONS_OPEN:
                inside = True
            elif stripped == _OBSERVATIONS_CLOSE:
                inside = False
            elif inside and (found := _OBSERVATION_LINE.match(line)):
                lines.append(found.group(1))
    return lines


def _relevant(facts: list[str], question: str) -> list[str]:
    """The lines sharing most words with the question (the newest of equals), in the log's order. Lines
    recording this model's own earlier answers are left out: quoting them again would only nest quotes."""
    words = {w.lower() for w in _WORD.findall(question)}
    own = [f for f in facts if _OWN_ANSWER not in f] or facts
    scored = [(len(words & {w.lower() for w in _WORD.findall(f)}), index) for index, f in enumerate(own)]
    best = sorted((s for s in scored if s[0] > 0), reverse=True)[:FACTS_SHOWN]
    if not best:
        return own[-FACTS_SHOWN:]
    return [own[index] for _, index in sorted(best, key=lambda s: s[1])]


def _tool_names(tools: Any) -> list[str]:
    names: list[str] = []
    for tool in tools if isinstance(tools, list) else []:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


def _arguments(text: str, after: int) -> str:
    """The JSON object written after ``call <tool>``, if any, else ``{}``."""
    rest = text[after:].strip()
    if rest.startswith("{"):
        try:
            value, _ = json.JSONDecoder().raw_decode(rest)
        except ValueError:
            return "{}"
        if isinstance(value, dict):
            return json.dumps(value, sort_keys=True)
    return "{}"


def _wanted_call(latest: str, tools: Any, tool_choice: Any) -> tuple[str, str] | None:
    names = _tool_names(tools)
    if not names or tool_choice == "none":
        return None
    if isinstance(tool_choice, Mapping):
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        if isinstance(name, str) and name in names:
            return name, "{}"
    for found in _CALL.finditer(latest):
        if found.group(1) in names:
            return found.group(1), _arguments(latest, found.end())
    if tool_choice == "required":
        return names[0], "{}"
    return None


def reply_to(messages: Sequence[Mapping[str, Any]], tools: Any = None, tool_choice: Any = None) -> ChatReply:
    """The reply to a prompt: a function of the messages, the tools and ``tool_choice`` alone."""
    prompt_tokens = sum(_tokens(_text(m.get("content"))) for m in messages)
    conversation = [m for m in messages if m.get("role") not in ("system", "developer")]
    last = conversation[-1] if conversation else {}
    if last.get("role") == "tool":
        text = f"Tool result: {_text(last.get('content'))[:QUOTE_MAX_CHARS]}"
        return ChatReply(text, prompt_tokens=prompt_tokens, completion_tokens=_tokens(text))
    latest = next((_text(m.get("content")) for m in reversed(conversation) if m.get("role") == "user"), "")
    if last.get("role") == "user" and (call := _wanted_call(latest, tools, tool_choice)) is not None:
        name, arguments = call
        digest = hashlib.sha256(f"{len(messages)}\n{name}\n{latest}".encode()).hexdigest()[:24]
        tool_call = {
            "id": f"call_{digest}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        return ChatReply(
            None, [tool_call], prompt_tokens=prompt_tokens, completion_tokens=_tokens(name + arguments)
        )
    quoted = " ".join(latest.split())[:QUOTE_MAX_CHARS]
    text = f'You said: "{quoted}". I see {len(conversation)} messages.'
    facts = observation_lines(messages)
    if facts:
        text += f" From {len(facts)} observations I remember: " + " | ".join(_relevant(facts, latest))
    else:
        text += " I have no observations yet."
    return ChatReply(text, prompt_tokens=prompt_tokens, completion_tokens=_tokens(text))


def reply_chunks(reply: ChatReply) -> Iterator[GenericStreamingChunk]:
    """The reply as a provider streams it: text a few words at a time, each tool call's arguments in two
    halves, then the finish with the usage."""
    words = (reply.text or "").split(" ")
    for start in range(0, len(words) if reply.text else 0, WORDS_PER_CHUNK):
        piece = " ".join(words[start : start + WORDS_PER_CHUNK])
        text = piece if start == 0 else " " + piece
        yield {"text": text, "is_finished": False, "finish_reason": "", "usage": None, "index": 0}
    for index, call in enumerate(reply.tool_calls):
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        halves: list[ChatCompletionToolCallChunk] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": arguments[:half]},
                "index": index,
            },
            {
                "id": None,
                "type": "function",
                "function": {"name": None, "arguments": arguments[half:]},
                "index": index,
            },
        ]
        for tool_use in halves:
            yield {
                "text": "",
                "tool_use": tool_use,
                "is_finished": False,
                "finish_reason": "",
                "usage": None,
                "index": 0,
            }
    yield {
        "text": "",
        "is_finished": True,
        "finish_reason": reply.finish_reason,
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
        "index": 0,
    }


def chat_completion(
    messages: list[Any], optional_params: Mapping[str, Any], model_response: ModelResponse
) -> ModelResponse:
    """``model_response`` filled with the chat model's answer (the ``om-local`` handler's completion)."""
    reply = reply_to(messages, optional_params.get("tools"), optional_params.get("tool_choice"))
    choice = model_response.choices[0]
    choice.message.content = reply.text
    if reply.tool_calls:
        choice.message.tool_calls = [
            ChatCompletionMessageToolCall(
                id=call["id"], type="function", function=Function(**call["function"])
            )
            for call in reply.tool_calls
        ]
    choice.finish_reason = reply.finish_reason
    model_response.model = FULL_NAME
    usage = Usage(
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
        total_tokens=reply.prompt_tokens + reply.completion_tokens,
    )
    setattr(model_response, "usage", usage)  # noqa: B010 - Usage is not a declared field of ModelResponse
    return model_response


def chat_stream(messages: list[Any], optional_params: Mapping[str, Any]) -> Iterator[GenericStreamingChunk]:
    """The chat model's answer as litellm's streaming chunks (the ``om-local`` handler's streaming)."""
    reply = reply_to(messages, optional_params.get("tools"), optional_params.get("tool_choice"))
    return reply_chunks(reply)
