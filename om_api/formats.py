"""The context as a ready chat-completions message list (``GET …/context?format=openai``)."""

from __future__ import annotations

import json
from typing import Any

from om_core.domain.context import ContextWindow


def _text(parts: list[dict[str, Any]]) -> str:
    return "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")


def _user_content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if all(p.get("type") in ("text",) or str(p.get("type", "")).startswith("data-") for p in parts):
        return _text(parts)
    content: list[dict[str, Any]] = []
    for part in parts:
        kind = part.get("type")
        if kind == "text":
            content.append({"type": "text", "text": part.get("text", "")})
        elif kind == "image":
            image: dict[str, Any] = {"url": part.get("url", "")}
            if part.get("detail"):
                image["detail"] = part["detail"]
            content.append({"type": "image_url", "image_url": image})
        elif kind == "file":
            file: dict[str, Any] = {"file_data": part.get("url", "")}
            if part.get("filename"):
                file["filename"] = part["filename"]
            content.append({"type": "file", "file": file})
    return content


def _tool_output(part: dict[str, Any]) -> str:
    value = part.get("result") if part.get("error") is None else {"error": part.get("error")}
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _message(message: dict[str, Any]) -> list[dict[str, Any]]:
    role = str(message.get("role", "user"))
    parts = [p for p in message.get("parts", []) if isinstance(p, dict)]
    if role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": _text(parts) or None}
        calls = [p for p in parts if p.get("type") == "tool-invocation"]
        results: list[dict[str, Any]] = []
        if calls:
            out["tool_calls"] = [
                {
                    "id": p.get("toolCallId"),
                    "type": "function",
                    "function": {"name": p.get("toolName"), "arguments": json.dumps(p.get("args") or {})},
                }
                for p in calls
            ]
            for p in calls:
                if p.get("state") == "result" or p.get("result") is not None or p.get("error") is not None:
                    results.append(
                        {"role": "tool", "tool_call_id": p.get("toolCallId"), "content": _tool_output(p)}
                    )
        return [out, *results]
    if role == "system":
        return [{"role": "system", "content": _text(parts)}]
    if role == "tool":
        # an OpenAI tool message was stored as the result of its call; it goes back as that message
        return [
            {"role": "tool", "tool_call_id": p.get("toolCallId"), "content": _tool_output(p)}
            for p in parts
            if p.get("type") == "tool-invocation"
        ]
    return [{"role": "user", "content": _user_content(parts)}]


def openai_messages(window: ContextWindow) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": text} for text in window.system]
    if window.continuation:
        messages.append({"role": "user", "content": window.continuation})
    for message in window.messages:
        messages.extend(_message(message))
    return messages
