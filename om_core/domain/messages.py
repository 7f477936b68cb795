"""The one message model every input format is normalised to.

Parts follow the AI SDK's UI message parts, which is also what Mastra stores; OpenAI chat messages are
converted into them. Messages are immutable once appended: their token count travels in the event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

Role = Literal["user", "assistant", "system", "tool"]
ROLES: tuple[Role, ...] = ("user", "assistant", "system", "tool")

ToolState = Literal[
    "partial-call", "call", "result", "error", "approval-requested", "approval-responded", "output-denied"
]


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str
    type: Literal["text"] = "text"
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image by URL or data URI. ``width``/``height``/``size_bytes`` feed the token heuristics."""

    url: str
    mime_type: str | None = None
    filename: str | None = None
    detail: Literal["low", "high", "auto"] | None = None
    width: int | None = None
    height: int | None = None
    size_bytes: int | None = None
    token_estimate: int | None = None
    # Gemini 3 prices an image by the requested resolution (low/medium/high/ultra_high), not by its size
    media_resolution: str | None = None
    type: Literal["image"] = "image"
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class FilePart:
    url: str
    mime_type: str
    filename: str | None = None
    size_bytes: int | None = None
    token_estimate: int | None = None
    type: Literal["file"] = "file"
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ToolInvocationPart:
    tool_call_id: str
    tool_name: str
    state: ToolState
    args: Any = None
    result: Any = None
    error: str | None = None
    # AI SDK v5 human-in-the-loop approval ``{id, approved, reason}``: the reason reaches the model
    approval: dict[str, Any] | None = None
    type: Literal["tool-invocation"] = "tool-invocation"
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ReasoningPart:
    text: str
    type: Literal["reasoning"] = "reasoning"
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class DataPart:
    """``data-*`` parts: application data that never reaches a model and counts 0 tokens."""

    type: str
    data: Any = None
    created_at: datetime | None = None


Part = TextPart | ImagePart | FilePart | ToolInvocationPart | ReasoningPart | DataPart


@dataclass(frozen=True, slots=True)
class Message:
    id: str
    role: Role
    parts: tuple[Part, ...]
    created_at: datetime
    thread_id: str | None = None
    # provider/model that produced an assistant message: drives provider-change activation and auto TTL
    model: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
