"""The transcript the Observer reads: messages rendered as dated, timed, one-line-per-part text.

Layout:

    May 15 2023:
    User (2:30 PM): I moved to Lisbon last week
    Assistant: Congratulations! …
    Tool Call get_weather (2:31 PM): {"city": "Lisbon"}
    Tool Result get_weather: {"temp_c": 21}
    1 hour 30 minutes later — 05/15/2023, 4:01 PM UTC
    User (4:01 PM): [Image #1: flat.png]

Continuation lines of a multi-line body are indented by two spaces. Every unindented line is therefore a
date header, a part line, a gap line or a thread tag, which is what keeps a message body from ever passing
for a part of the prompt around it (a user typing the transcript's closing delimiter, for instance).
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, tzinfo
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from om_core.domain.dates import (
    TEMPORAL_MESSAGE_ID_PREFIX,
    format_clock_12h,
    format_transcript_date,
    local_datetime,
    temporal_gap_marker,
)
from om_core.domain.messages import (
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolInvocationPart,
)

DEFAULT_TOOL_RESULT_MAX_TOKENS = 5_000
TOOL_ARGS_MAX_TOKENS = 2_000
ARGS_STRING_MAX_CHARS = 160
ARGS_MAX_DEPTH = 5
ARGS_MAX_ENTRIES = 20

_TERMINAL_TOOL_STATES = frozenset({"result", "error", "output-denied"})
_MEDIA_BLOCK_TYPES = frozenset({"image-data", "image-url", "media", "file-data", "file-url"})
_IMAGE_EXTENSIONS = frozenset(
    {"png", "jpg", "jpeg", "gif", "webp", "bmp", "svg", "heic", "heif", "tif", "tiff", "avif"}
)
_SYSTEM_REMINDER_TAG = re.compile(r"</?system-reminder[^>]*>")
_CONTINUATION_INDENT = "  "


def _char_proxy_tokens(text: str) -> int:
    # About four characters per token: close enough to bound a tool result when no tokenizer is given.
    return math.ceil(len(text) / 4)


@dataclass(frozen=True, slots=True)
class TranscriptAttachment:
    """An image or file the transcript shows as a placeholder, for the caller to forward to the model."""

    kind: Literal["image", "file"]
    number: int
    placeholder: str
    url: str
    mime_type: str | None
    filename: str | None
    message_id: str


@dataclass(frozen=True, slots=True)
class TranscriptResult:
    text: str
    attachments: tuple[TranscriptAttachment, ...] = ()


def obscure_thread_id(thread_id: str) -> str:
    """A stable short alias for a thread id, so models never see (or echo) the real identifier."""
    return "t_" + hashlib.sha256(thread_id.encode("utf-8")).hexdigest()[:12]


def truncate_to_tokens(text: str, max_tokens: int, count_tokens: Callable[[str], int]) -> str:
    """The longest prefix of ``text`` within ``max_tokens``, with a note saying how much was cut."""
    total = count_tokens(text)
    if total <= max_tokens:
        return text
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if count_tokens(text[:middle]) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return f"{text[:low]}\n… [truncated: about {total} tokens, first {max_tokens} shown]"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…(+{len(text) - limit} chars)"


def _bounded(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return _clip(value, ARGS_STRING_MAX_CHARS)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dict):
        if depth >= ARGS_MAX_DEPTH:
            return "{…}"
        items = list(value.items())
        bounded = {str(key): _bounded(item, depth + 1) for key, item in items[:ARGS_MAX_ENTRIES]}
        if len(items) > ARGS_MAX_ENTRIES:
            bounded["…"] = f"+{len(items) - ARGS_MAX_ENTRIES} more keys"
        return bounded
    if isinstance(value, list | tuple):
        if depth >= ARGS_MAX_DEPTH:
            return "[…]"
        shown = [_bounded(item, depth + 1) for item in value[:ARGS_MAX_ENTRIES]]
        if len(value) > ARGS_MAX_ENTRIES:
            shown.append(f"…(+{len(value) - ARGS_MAX_ENTRIES} more items)")
        return shown
    return _clip(str(value), ARGS_STRING_MAX_CHARS)


def render_tool_args(args: Any, count_tokens: Callable[[str], int] = _char_proxy_tokens) -> str:
    """A tool call's arguments as compact JSON, bounded in string length, depth, breadth and tokens."""
    if args is None or args == {}:
        return "(no arguments)"
    if isinstance(args, str):
        rendered = _clip(args, ARGS_STRING_MAX_CHARS)
    else:
        rendered = json.dumps(_bounded(args, 0), ensure_ascii=False, default=str)
    return truncate_to_tokens(rendered, TOOL_ARGS_MAX_TOKENS, count_tokens)


def _without_encrypted_content(value: Any) -> Any:
    # Provider-encrypted payloads are opaque bytes to the Observer and can be very large.
    if isinstance(value, dict):
        return {k: _without_encrypted_content(v) for k, v in value.items() if k != "encryptedContent"}
    if isinstance(value, list):
        return [_without_encrypted_content(item) for item in value]
    return value


def _media_blocks(result: Any) -> list[Any] | None:
    """The content blocks of a multimodal tool result, or None when the result is plain data."""
    blocks = result.get("value") if isinstance(result, dict) and result.get("type") == "content" else result
    if not isinstance(blocks, list) or not blocks:
        return None
    if not all(isinstance(block, dict) and isinstance(block.get("type"), str) for block in blocks):
        return None
    if not any(block["type"] in _MEDIA_BLOCK_TYPES for block in blocks):
        return None
    return blocks


def _is_image_like(url: str, mime_type: str | None, filename: str | None) -> bool:
    if mime_type and mime_type.lower().startswith("image/"):
        return True
    if url.startswith("data:image/"):
        return True
    for name in (filename or "", urlsplit(url).path if not url.startswith("data:") else ""):
        if "." in name and name.rsplit(".", 1)[1].lower() in _IMAGE_EXTENSIONS:
            return True
    return False


def _attachment_name(url: str, mime_type: str | None, filename: str | None) -> str:
    if filename:
        return filename
    if not url.startswith("data:"):
        basename = unquote(urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1])
        if basename:
            return basename
    return mime_type or "attachment"


@dataclass
class _Writer:
    """Rendering state that must carry across messages (and, for counters, across threads)."""

    tz: tzinfo
    gap_markers: bool
    count_tokens: Callable[[str], int]
    tool_result_max_tokens: int
    max_part_length: int | None
    message_id: str = ""
    lines: list[str] = field(default_factory=list)
    attachments: list[TranscriptAttachment] = field(default_factory=list)
    image_count: int = 0
    file_count: int = 0
    last_date: date | None = None
    last_time: str | None = None
    signed_calls: set[str] = field(default_factory=set)
    finished_calls: set[str] = field(default_factory=set)
    previous_message_end: datetime | None = None
    previous_was_marker: bool = False

    def start_thread(self) -> None:
        self.lines = []
        self.last_date = None
        self.last_time = None
        self.previous_message_end = None
        self.previous_was_marker = False

    def emit(self, title: str, at: datetime, body: str) -> None:
        local = local_datetime(at, self.tz)
        if local.date() != self.last_date:
            self.lines.append(f"{format_transcript_date(local)}:")
            self.last_date = local.date()
            self.last_time = None
        clock = format_clock_12h(local)
        head = title if clock == self.last_time else f"{title} ({clock})"
        self.last_time = clock
        if self.max_part_length is not None and len(body) > self.max_part_length:
            cut = len(body) - self.max_part_length
            body = f"{body[: self.max_part_length]}... [truncated {cut} characters]"
        first, *rest = body.split("\n")
        self.lines.append(f"{head}: {first}")
        self.lines.extend(_CONTINUATION_INDENT + line if line.strip() else "" for line in rest)

    def attach(self, url: str, mime_type: str | None, filename: str | None) -> str:
        if _is_image_like(url, mime_type, filename):
            self.image_count += 1
            kind: Literal["image", "file"] = "image"
            number = self.image_count
        else:
            self.file_count += 1
            kind = "file"
            number = self.file_count
        placeholder = f"[{kind.capitalize()} #{number}: {_attachment_name(url, mime_type, filename)}]"
        self.attachments.append(
            TranscriptAttachment(kind, number, placeholder, url, mime_type, filename, self.message_id)
        )
        return placeholder

    def render_result(self, result: Any) -> str:
        if result is None or result == "":
            return "[empty result]"
        blocks = _media_blocks(result)
        if blocks is not None:
            rendered = "\n".join(self._render_block(block) for block in blocks)
        elif isinstance(result, str):
            rendered = result
        else:
            rendered = json.dumps(_without_encrypted_content(result), ensure_ascii=False, default=str)
        return truncate_to_tokens(rendered, self.tool_result_max_tokens, self.count_tokens)

    def _render_block(self, block: dict[str, Any]) -> str:
        kind = block["type"]
        if kind not in _MEDIA_BLOCK_TYPES:
            text = block.get("text")
            return text if isinstance(text, str) else json.dumps(block, ensure_ascii=False, default=str)
        mime = block.get("mediaType") or block.get("mimeType")
        mime = mime if isinstance(mime, str) else None
        if kind.endswith("-url"):
            url = str(block.get("url", ""))
        else:
            url = f"data:{mime or 'application/octet-stream'};base64,{block.get('data', '')}"
        if kind.startswith("image-") and mime is None:
            mime = "image/*"
        filename = block.get("filename")
        return self.attach(url, mime, filename if isinstance(filename, str) else None)

    def write_message(self, message: Message) -> None:
        self.message_id = message.id
        if message.id.startswith(TEMPORAL_MESSAGE_ID_PREFIX):
            text = " ".join(p.text for p in message.parts if isinstance(p, TextPart))
            marker = " ".join(_SYSTEM_REMINDER_TAG.sub("", text).split())
            if marker:
                self.lines.append(marker)
                self.previous_was_marker = True
            return
        stamps = [part.created_at or message.created_at for part in message.parts] or [message.created_at]
        if (
            self.gap_markers
            and message.role == "user"
            and not self.previous_was_marker
            and self.previous_message_end is not None
        ):
            marker_text = temporal_gap_marker(self.previous_message_end, min(stamps), self.tz)
            if marker_text is not None:
                self.lines.append(marker_text)
        self.previous_message_end = max(stamps)
        self.previous_was_marker = False
        role_title = message.role.capitalize()
        for part in message.parts:
            at = part.created_at or message.created_at
            if isinstance(part, TextPart):
                if part.text.strip():
                    self.emit(role_title, at, part.text)
            elif isinstance(part, ReasoningPart):
                if part.text.strip():
                    self.emit("Reasoning", at, part.text)
            elif isinstance(part, ImagePart | FilePart):
                self.emit(role_title, at, self.attach(part.url, part.mime_type, part.filename))
            elif isinstance(part, ToolInvocationPart):
                self.write_tool(part, at)
            # data-* parts are application data that never reaches a model

    def write_tool(self, part: ToolInvocationPart, at: datetime) -> None:
        # Streaming snapshots of half-written arguments would print a signature the real call contradicts.
        if part.state == "partial-call":
            return
        call_id = part.tool_call_id
        if call_id not in self.signed_calls:
            self.signed_calls.add(call_id)
            self.emit(f"Tool Call {part.tool_name}", at, render_tool_args(part.args, self.count_tokens))
        if part.state not in _TERMINAL_TOOL_STATES or call_id in self.finished_calls:
            return
        self.finished_calls.add(call_id)
        if part.state == "result":
            self.emit(f"Tool Result {part.tool_name}", at, self.render_result(part.result))
        elif part.state == "error":
            detail = part.error or (self.render_result(part.result) if part.result is not None else "")
            self.emit(f"Tool Error {part.tool_name}", at, detail or "the tool failed")
        else:
            self.emit(f"Tool Denied {part.tool_name}", at, part.error or "the user denied this call")


def _writer(
    tz: tzinfo,
    gap_markers: bool,
    count_tokens: Callable[[str], int] | None,
    tool_result_max_tokens: int,
    max_part_length: int | None,
) -> _Writer:
    return _Writer(
        tz=tz,
        gap_markers=gap_markers,
        count_tokens=count_tokens or _char_proxy_tokens,
        tool_result_max_tokens=tool_result_max_tokens,
        max_part_length=max_part_length,
    )


def format_transcript(
    messages: Sequence[Message],
    *,
    tz: tzinfo = UTC,
    gap_markers: bool,
    count_tokens: Callable[[str], int] | None = None,
    tool_result_max_tokens: int = DEFAULT_TOOL_RESULT_MAX_TOKENS,
    max_part_length: int | None = None,
) -> TranscriptResult:
    """Render ``messages`` (in the order given) for the Observer.

    Messages whose id starts with ``__temporal_`` become bare gap lines. With ``gap_markers`` a gap line is
    also synthesised before a user message that follows ≥ 10 minutes of silence, unless a marker message
    already precedes it. Without ``count_tokens`` tool results are bounded by a 4-characters-per-token proxy.
    ``max_part_length`` cuts each part's body to that many characters (the other-threads context block).
    """
    writer = _writer(tz, gap_markers, count_tokens, tool_result_max_tokens, max_part_length)
    for message in messages:
        writer.write_message(message)
    return TranscriptResult("\n".join(writer.lines), tuple(writer.attachments))


def format_multi_thread_transcript(
    threads: Sequence[tuple[str, Sequence[Message]]],
    *,
    tz: tzinfo = UTC,
    gap_markers: bool,
    count_tokens: Callable[[str], int] | None = None,
    tool_result_max_tokens: int = DEFAULT_TOOL_RESULT_MAX_TOKENS,
    max_part_length: int | None = None,
) -> TranscriptResult:
    """One ``<thread id="…">`` block per thread that renders to anything, separated by blank lines.

    Attachment numbers run across threads so every placeholder in one Observer request is unique.
    """
    writer = _writer(tz, gap_markers, count_tokens, tool_result_max_tokens, max_part_length)
    blocks: list[str] = []
    for thread_id, messages in threads:
        writer.start_thread()
        for message in messages:
            writer.write_message(message)
        if writer.lines:
            body = "\n".join(writer.lines)
            blocks.append(f'<thread id="{html.escape(thread_id, quote=True)}">\n{body}\n</thread>')
    return TranscriptResult("\n\n".join(blocks), tuple(writer.attachments))
