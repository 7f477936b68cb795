"""The ``recall`` tool (docs/api.md, Recall): read back raw messages that observations only summarise.

Modes: ``messages`` (page around a cursor message, forward or backward, or from either end of a thread),
``threads`` (the resource's threads with creation-date filters) and ``search`` (Postgres full-text by
default; SQLite substring match embedded). What a call may read is the calling thread and, unless
``retrieval.scope`` is ``thread``, the other threads of its resource, whichever memory scope keeps the record
(one stream per thread, or one per resource that every thread appends to). Messages page in stream order;
a cursor is looked up in that reach only. Paging rules follow Mastra's ``om-tools.ts``: ``page`` 0 counts as
1, pages are clamped to ±50 and ``limit`` to 1..20; page −1 is the ``limit`` messages right before the cursor;
``hasNextPage``/``hasPrevPage`` come from fetching one row more than needed; data-only messages take no page
slot; threads pages count from 0. ``detail=low`` truncates each part with a hint to fetch it whole;
``detail=high`` returns one part per call with hints to the next one; ``partIndex`` returns one part of the
cursor message, chunked by ``charOffset`` when it exceeds the token budget. Messages answers carry the
reference's ``count``, ``truncated`` and ``tokenOffset``; threads answers ``count`` and ``hasMore``.

The answer is the tool's result as the model reads it (camelCase keys, hints phrased as calls), the same
in process as over HTTP; what the tool refuses it raises as a RecallError.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from om_core.application.configuration import counter_for
from om_core.application.deps import Deps
from om_core.application.ports import ThreadRow
from om_core.application.profiles import config_of
from om_core.application.streams import RecordNotFoundError, record_stream_for, thread_stream_id
from om_core.application.threads import record_stream, thread_state
from om_core.application.vector_index import GroupHit, search_observations, vector_index_enabled
from om_core.domain.config import MemoryConfig, RetrievalConfig
from om_core.domain.envelope import StoredMessage

MAX_PAGE = 50
MAX_LIMIT = 20
DEFAULT_LIMIT = 20
THREADS_MAX_LIMIT = 50
SEARCH_DEFAULT_TOP_K = 10
SEARCH_MAX_TOP_K = 20
LOW_TEXT_TOKENS = 100
LOW_TOOL_TOKENS = 20
LOW_OTHER_TOKENS = 30
EXPAND_USER_TEXT_TOKENS = 200
EXPAND_OTHER_TOKENS = 50
OUTPUT_BUDGET_TOKENS = 2_000

Mode = Literal["messages", "threads", "search"]
Detail = Literal["low", "high"]
CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class RecallQuery:
    mode: Mode = "messages"
    query: str | None = None
    cursor: str | None = None
    thread_id: str | None = None
    anchor: Literal["start", "end"] = "start"
    # None: the mode's first page (1 for messages, 0 for threads)
    page: int | None = None
    limit: int | None = None
    detail: Detail = "low"
    part_type: str | None = None
    tool_name: str | None = None
    part_index: int | None = None
    char_offset: int = 0
    before: datetime | None = None
    after: datetime | None = None


def normalize_page(page: int | None) -> int:
    """``page: 0`` ⇒ 1, clamped to −50..50 (scenario 35)."""
    if page is None or page == 0:
        return 1
    return max(-MAX_PAGE, min(MAX_PAGE, page))


def normalize_limit(limit: int | None, default: int = DEFAULT_LIMIT, maximum: int = MAX_LIMIT) -> int:
    if limit is None:
        return default
    return max(1, min(maximum, limit))


# --- what the tool refuses ---------------------------------------------------------------------------


class RecallError(ValueError):
    """A recall the tool cannot answer as asked; ``details`` says what to pass instead, where it can."""

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.details: dict[str, Any] = details or {}


class CursorIsRangeError(RecallError):
    """The cursor is an observation group's ``start:end`` range (or a list), not one message id."""

    def __init__(self, cursor: str) -> None:
        first = cursor.split(",")[0].split(":")[0]
        super().__init__(
            f"cursor {cursor!r} is a message range, not a message id; pass one id from it, "
            f'e.g. cursor="{first}" (the start of the range)',
            {"cursor": cursor, "hint": f'recall cursor="{first}"'},
        )


class CursorNotFoundError(RecallError):
    """No message with the cursor's id in what the call may read (one of another resource counts as none)."""

    def __init__(self, cursor: str) -> None:
        super().__init__(f"no message {cursor!r} in the threads this recall can read", {"cursor": cursor})


class CursorAmbiguousError(RecallError):
    """Threads of the resource kept apart (thread scope) each hold a message of the cursor's id."""

    def __init__(self, cursor: str, thread_ids: list[str]) -> None:
        super().__init__(
            f"message id {cursor!r} exists in threads {', '.join(thread_ids)}; pass threadId to say which",
            {
                "cursor": cursor,
                "threads": thread_ids,
                "hint": f'recall cursor="{cursor}" threadId="{thread_ids[0]}"',
            },
        )


class CursorRequiredError(RecallError):
    def __init__(self) -> None:
        super().__init__("partIndex needs the cursor of the message it belongs to")


class PartIndexOutOfRangeError(RecallError):
    def __init__(self, message_id: str, parts: int, index: int) -> None:
        super().__init__(f"message {message_id!r} has {parts} parts; partIndex {index} does not exist")


class CharOffsetOutOfRangeError(RecallError):
    def __init__(self, length: int) -> None:
        super().__init__(f"charOffset must be within 0..{length}")


class QueryRequiredError(RecallError):
    def __init__(self) -> None:
        super().__init__("search mode needs a non-empty query")


class ThreadScopeError(RecallError):
    """Another thread was asked for, but ``retrieval.scope`` is ``thread``."""

    def __init__(self) -> None:
        super().__init__("retrieval.scope is thread: recall can only read the current thread")


# what ``partType`` selects: Mastra's kinds (a tool invocation is a ``tool-call``, and a ``tool-result`` once
# it has an outcome) and this service's own stored type ``tool-invocation`` (the part whole)
PART_TYPES = ("text", "tool-call", "tool-result", "reasoning", "image", "file", "tool-invocation")
_TOOL_OUTCOMES = ("result", "error", "output-denied")

_RANGE = re.compile(r"^[^:,\s]+:[^:,\s]+$")


def _is_range(cursor: str) -> bool:
    return "," in cursor or _RANGE.match(cursor) is not None


# --- tool schema ------------------------------------------------------------------------------------------


RECALL_DESCRIPTION = (
    "Recall raw messages of this conversation that your observations only summarise. Use it to quote or "
    "repeat something exactly, or to verify a detail. Pass a message id from an observation group's range "
    "as `cursor`; page forward (page 1, 2, …) or backward (page -1, -2, …) from it. `detail: low` (default) "
    "shows every part truncated with a hint; `detail: high` shows one part at a time; `partIndex` fetches "
    "one part of the cursor message in full, continued with `charOffset`. `mode: threads` lists "
    "conversations (filter with `before`/`after`); `mode: search` finds what was said (`query`): by "
    "meaning among the observation groups when the memory keeps a vector index, else messages by words; "
    "each result's `cursor` is where `mode: messages` reads the originals."
)


def tool_schema() -> dict[str, Any]:
    """The recall tool as a function-calling tool definition (OpenAI/litellm ``tools`` entry shape)."""
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "mode": {"type": "string", "enum": ["messages", "threads", "search"], "default": "messages"},
            "query": {"type": "string", "description": "search mode: what to look for"},
            "cursor": {"type": "string", "description": "a message id (not a start:end range)"},
            "threadId": {"type": "string", "description": "another thread of this resource, or 'current'"},
            "anchor": {"type": "string", "enum": ["start", "end"], "default": "start"},
            "page": {
                "type": "integer",
                "minimum": -MAX_PAGE,
                "maximum": MAX_PAGE,
                "description": "messages: from the cursor, 1 (default) forward, -1 backward; threads: from 0",
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
            "detail": {"type": "string", "enum": ["low", "high"], "default": "low"},
            "partType": {
                "type": "string",
                "enum": list(PART_TYPES),
                "description": "messages mode: only parts of this type",
            },
            "toolName": {
                "type": "string",
                "description": "messages mode: only tool calls and results of this tool",
            },
            "partIndex": {"type": "integer", "minimum": 0, "description": "one part of the cursor message"},
            "charOffset": {"type": "integer", "minimum": 0, "description": "continue a long part from here"},
            "before": {
                "type": "string",
                "format": "date-time",
                "description": "threads mode: created before",
            },
            "after": {"type": "string", "format": "date-time", "description": "threads mode: created after"},
        },
        "additionalProperties": False,
    }
    return {
        "type": "function",
        "function": {"name": "recall", "description": RECALL_DESCRIPTION, "parameters": parameters},
    }


# --- rendering parts --------------------------------------------------------------------------------------


def _part_text(part: dict[str, Any], part_type: str | None = None) -> str:
    """A part as recall shows it; a tool invocation asked for as ``tool-call`` or ``tool-result`` shows that
    side only."""
    kind = str(part.get("type", ""))
    if kind in ("text", "reasoning"):
        return str(part.get("text", ""))
    if kind == "tool-invocation":
        body: dict[str, Any] = {"tool": part.get("toolName"), "state": part.get("state")}
        keys = {"tool-call": ("args",), "tool-result": ("result", "error")}.get(
            part_type or "", ("args", "result", "error")
        )
        for key in keys:
            if part.get(key) is not None:
                body[key] = part[key]
        return json.dumps(body, ensure_ascii=False)
    if kind in ("image", "file"):
        name = part.get("filename") or part.get("mimeType") or kind
        return f"[{kind}: {name}]"
    return json.dumps(part.get("data"), ensure_ascii=False)


def _is_data_only(message: StoredMessage) -> bool:
    parts = message.message.get("parts", [])
    return bool(parts) and all(
        str(p.get("type", "")).startswith("data-") for p in parts if isinstance(p, dict)
    )


def _truncate(text: str, tokens: int, count: CountTokens) -> tuple[str, bool]:
    if count(text) <= tokens:
        return text, False
    # binary search on characters for the longest prefix within the budget; never split a surrogate pair
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(text[:mid]) <= tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo], True


def _low_budget(part: dict[str, Any]) -> int:
    kind = str(part.get("type", ""))
    if kind == "text":
        return LOW_TEXT_TOKENS
    if kind == "tool-invocation":
        return LOW_TOOL_TOKENS
    return LOW_OTHER_TOKENS


def _matches(part: dict[str, Any], q: RecallQuery) -> bool:
    kind = part.get("type")
    if q.part_type == "tool-call":
        if kind != "tool-invocation":
            return False
    elif q.part_type == "tool-result":
        if kind != "tool-invocation" or part.get("state") not in _TOOL_OUTCOMES:
            return False
    elif q.part_type and kind != q.part_type:
        return False
    return not (q.tool_name and part.get("toolName") != q.tool_name)


def _message_out(message: StoredMessage, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": message.message_id,
        "role": message.role,
        "createdAt": message.created_at.isoformat(),
        "threadId": message.thread_id,
        "parts": parts,
    }


def _render_low(messages: list[StoredMessage], q: RecallQuery, count: CountTokens) -> dict[str, Any]:
    rendered: list[tuple[StoredMessage, list[dict[str, Any]]]] = []
    pending: list[tuple[int, dict[str, Any], str, int]] = []  # priority, output part, full text, limit
    used = 0
    for message in messages:
        out_parts: list[dict[str, Any]] = []
        for index, part in enumerate(message.message.get("parts", [])):
            if not isinstance(part, dict) or not _matches(part, q):
                continue
            full = _part_text(part, q.part_type)
            text, cut = _truncate(full, _low_budget(part), count)
            entry: dict[str, Any] = {"partIndex": index, "type": part.get("type"), "text": text}
            if part.get("toolName"):
                entry["toolName"] = part["toolName"]
            if cut:
                entry["truncated"] = True
                entry["hint"] = f'recall cursor="{message.message_id}" partIndex={index} detail="high"'
                user_text = message.role == "user" and part.get("type") == "text"
                pending.append(
                    (
                        0 if user_text else 1,
                        entry,
                        full,
                        EXPAND_USER_TEXT_TOKENS if user_text else EXPAND_OTHER_TOKENS,
                    )
                )
            used += count(text)
            out_parts.append(entry)
        if out_parts or not (q.part_type or q.tool_name):
            # under a part filter a message with nothing of that kind still takes its page slot, unshown
            rendered.append((message, out_parts))
    # leftover budget widens truncated parts: the user's own words first
    for _, entry, full, cap in sorted(pending, key=lambda item: item[0]):
        left = OUTPUT_BUDGET_TOKENS - used
        if left <= 0:
            break
        before = count(entry["text"])
        text, cut = _truncate(full, min(cap, before + left), count)
        if len(text) > len(entry["text"]):
            entry["text"] = text
            used += count(text) - before
            if not cut:
                entry.pop("truncated", None)
                entry.pop("hint", None)
    shown = [_message_out(m, parts) for m, parts in rendered]
    if used > OUTPUT_BUDGET_TOKENS:
        # hard limit: drop whole trailing messages until the output fits; ``tokenOffset`` is how much was cut
        kept_tokens = 0
        for kept, message_json in enumerate(shown):
            size = sum(count(p["text"]) for p in message_json["parts"])
            if kept_tokens + size > OUTPUT_BUDGET_TOKENS and kept:
                return _page_out(shown[:kept], truncated=True, token_offset=used - kept_tokens)
            kept_tokens += size
    return _page_out(shown, truncated=False, token_offset=0)


def _page_out(shown: list[dict[str, Any]], *, truncated: bool, token_offset: int) -> dict[str, Any]:
    return {"messages": shown, "count": len(shown), "truncated": truncated, "tokenOffset": token_offset}


# --- what one call may read -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Reach:
    """The calling thread and, when ``across``, the other threads of its resource.

    ``shared``: the memory keeps one record per resource, so every thread's messages are in one stream and
    a thread is a filter on it; otherwise each thread is a stream of its own.
    """

    deps: Deps
    tenant: str
    thread_id: str
    resource_id: str | None
    stream_id: str
    shared: bool
    across: bool
    # the profile of the calling thread: another agent's threads of the same resource are not its memory
    profile: str | None = None

    def stream_of(self, thread_id: str) -> str:
        if thread_id == self.thread_id or self.shared:
            return self.stream_id
        return record_stream_for(self.deps, self.tenant, thread_id, self.resource_id)

    def thread_named(self, requested: str | None) -> str:
        """The thread ``threadId`` names, once it is known to be one this call may read."""
        if requested in (None, "", "current") or requested == self.thread_id:
            return self.thread_id
        assert requested is not None
        if not self.across:
            raise ThreadScopeError()
        other = thread_state(self.deps, tenant=self.tenant, thread_id=requested)
        if self.resource_id is None or other.resource_id != self.resource_id or other.profile != self.profile:
            # a thread of another resource is no thread at all, as one of another tenant is
            raise RecordNotFoundError(thread_stream_id(self.tenant, requested))
        return requested

    def resource_threads(self) -> list[ThreadRow]:
        """Every thread of the resource, most recently updated first."""
        assert self.resource_id is not None
        rows: list[ThreadRow] = []
        while True:
            batch = self.deps.records.list_threads(
                self.tenant,
                resource_id=self.resource_id,
                limit=THREADS_BATCH,
                offset=len(rows),
                profile=self.profile,
            )
            rows.extend(batch)
            if len(batch) < THREADS_BATCH:
                return rows

    def cursor_message(self, cursor: str, named: str | None) -> StoredMessage:
        """The cursor's message: in the named thread, else the calling thread, else (when the reach spans
        the resource) whichever thread of the resource holds it."""
        if _is_range(cursor):
            raise CursorIsRangeError(cursor)
        thread = named or self.thread_id
        own = [
            m
            for m in self.deps.messages.messages_with_id([self.stream_of(thread)], cursor)
            if m.thread_id == thread
        ]
        if own:
            return own[0]
        if named is None and self.across and self.resource_id is not None:
            streams = (
                [self.stream_id]
                if self.shared
                else [self.stream_of(r.thread_id) for r in self.resource_threads() if r.thread_id != thread]
            )
            found = self.deps.messages.messages_with_id(streams, cursor)
            if len(found) > 1:
                raise CursorAmbiguousError(cursor, sorted(str(m.thread_id) for m in found))
            if found:
                return found[0]
        raise CursorNotFoundError(cursor)


# list_threads fetches a resource's threads this many at a time
THREADS_BATCH = 500


def _reach(
    deps: Deps,
    tenant: str,
    thread_id: str,
    resource_id: str | None,
    config: MemoryConfig,
    profile: str | None,
) -> _Reach:
    retrieval = config.retrieval or RetrievalConfig()
    stream_id = record_stream(deps, tenant=tenant, thread_id=thread_id)
    return _Reach(
        deps=deps,
        tenant=tenant,
        thread_id=thread_id,
        resource_id=resource_id,
        stream_id=stream_id,
        shared=stream_id != thread_stream_id(tenant, thread_id),
        across=retrieval.scope == "resource",
        profile=profile,
    )


# --- the modes --------------------------------------------------------------------------------------------


# the vector index's search (query, top k), when the record's retrieval has ``vector: true``
SemanticSearch = Callable[[str, int], list[GroupHit]]


def recall(deps: Deps, *, tenant: str, thread_id: str, query: RecallQuery) -> dict[str, Any]:
    """Use case: the recall tool called from the thread ``thread_id``.

    Raises RecordNotFoundError when the thread (or the other thread asked for) does not exist or is not
    one of the resource's, a RecallError when the call cannot be answered as asked, and ModelError when
    search needs the embedder and it fails.
    """
    state = thread_state(deps, tenant=tenant, thread_id=thread_id)
    config = config_of(deps, state)
    reach = _reach(deps, tenant, thread_id, state.resource_id, config, state.profile)
    if query.mode == "threads":
        return _threads(reach, query)
    if query.mode == "search" and vector_index_enabled(config):

        def semantic(text: str, top_k: int) -> list[GroupHit]:
            return search_observations(
                deps, tenant=tenant, thread_id=thread_id, query=text, top_k=top_k, config=config
            )

        return _semantic_search(thread_id, query, semantic)
    if query.mode == "search":
        return _search(reach, query)
    return _messages(reach, query, counter_for(config).count_text)


def _messages(reach: _Reach, q: RecallQuery, count: CountTokens) -> dict[str, Any]:
    target = reach.thread_named(q.thread_id)
    named = None if target == reach.thread_id and q.thread_id in (None, "", "current") else target
    page = normalize_page(q.page)
    limit = normalize_limit(q.limit)
    cursor_message: StoredMessage | None = None
    if q.cursor:
        cursor_message = reach.cursor_message(q.cursor, named)
        # a cursor of another thread of the resource browses that thread
        target = cursor_message.thread_id or target
    if q.part_index is not None:
        if cursor_message is None:
            raise CursorRequiredError()
        part = _one_part(cursor_message, q.part_index, q.char_offset, count)
        return {"mode": "messages", "threadId": target, "cursor": q.cursor, "detail": "high", **part}

    backward = page < 0 or (cursor_message is None and q.anchor == "end")
    skip = (abs(page) - 1) * limit
    wanted = skip + limit + 1
    cursor_seq = cursor_message.seq if cursor_message else None
    rows = _collect(reach.deps, reach.stream_of(target), target, cursor_seq, backward, wanted)
    if backward:
        # nearest first for slot counting, then back to stream order
        nearest = list(reversed(rows))
        page_rows = list(reversed(nearest[skip : skip + limit]))
        more_beyond = len(nearest) > skip + limit
        has_prev, has_next = more_beyond, skip > 0 or cursor_message is not None
    else:
        page_rows = rows[skip : skip + limit]
        has_next = len(rows) > skip + limit
        has_prev = skip > 0 or cursor_message is not None
    result: dict[str, Any] = {
        "mode": "messages",
        "threadId": target,
        "cursor": q.cursor,
        "page": page,
        "limit": limit,
        "detail": q.detail,
        "hasNextPage": has_next,
        "hasPrevPage": has_prev,
    }
    if q.detail == "high":
        result.update(_high(page_rows, q, count, page))
    else:
        result.update(_render_low(page_rows, q, count))
    return result


def _collect(
    deps: Deps, stream_id: str, thread_id: str, cursor: int | None, backward: bool, wanted: int
) -> list[StoredMessage]:
    """Up to ``wanted`` non-data-only messages of the thread after (or before) the seq ``cursor``, in
    stream order."""
    found: list[StoredMessage] = []
    position = cursor
    batch = max(wanted, 50)
    while len(found) < wanted:
        page = deps.messages.read_messages(
            stream_id, thread_id=thread_id, cursor=position, backward=backward, limit=batch
        )
        if not page:
            break
        ordered = list(reversed(page)) if backward else page
        for message in ordered:
            if not _is_data_only(message):
                found.append(message)
                if len(found) >= wanted:
                    break
        position = ordered[-1].seq
        if len(page) < batch:
            break
    return list(reversed(found)) if backward else found


def _high(rows: list[StoredMessage], q: RecallQuery, count: CountTokens, page: int) -> dict[str, Any]:
    """Exactly one part: the first matching part of the page, with hints to what follows."""
    for position, message in enumerate(rows):
        parts = [
            (i, p)
            for i, p in enumerate(message.message.get("parts", []))
            if isinstance(p, dict) and _matches(p, q)
        ]
        if not parts:
            continue
        index, _ = parts[0]
        out = _one_part(message, index, 0, count, q.part_type)
        hints = []
        if len(parts) > 1:
            hints.append(
                f'next part: recall cursor="{message.message_id}" partIndex={parts[1][0]} detail="high"'
            )
        if position + 1 < len(rows):
            hints.append(f'next message: recall cursor="{message.message_id}" detail="high"')
        hints.append(f"next page: page={page + 1 if page > 0 else page - 1}")
        out["hints"] = hints
        return out
    return {"messages": [], "count": 0, "truncated": False, "tokenOffset": 0, "hints": []}


def _one_part(
    message: StoredMessage, index: int, char_offset: int, count: CountTokens, part_type: str | None = None
) -> dict[str, Any]:
    """One part whole, or the chunk of it from ``char_offset`` that fits the budget (``truncated``, with the
    tokens left as ``tokenOffset`` and where to continue)."""
    parts = message.message.get("parts", [])
    if index < 0 or index >= len(parts):
        raise PartIndexOutOfRangeError(message.message_id, len(parts), index)
    part = parts[index]
    full = _part_text(part, part_type)
    if char_offset < 0 or char_offset > len(full):
        raise CharOffsetOutOfRangeError(len(full))
    rest = full[char_offset:]
    text, cut = _truncate(rest, OUTPUT_BUDGET_TOKENS, count)
    if cut and text and 0xD800 <= ord(text[-1]) <= 0xDBFF:
        text = text[:-1]
    entry: dict[str, Any] = {"partIndex": index, "type": part.get("type"), "text": text}
    if part.get("toolName"):
        entry["toolName"] = part["toolName"]
    out: dict[str, Any] = {
        "messages": [_message_out(message, [entry])],
        "count": 1,
        "truncated": cut,
        "tokenOffset": count(rest[len(text) :]) if cut else 0,
    }
    if cut:
        next_offset = char_offset + len(text)
        out["nextCharOffset"] = next_offset
        out["hint"] = f'recall cursor="{message.message_id}" partIndex={index} charOffset={next_offset}'
    return out


def _thread_out(row: ThreadRow, current: str) -> dict[str, Any]:
    here = row.thread_id == current
    return {
        "id": row.thread_id,
        "title": row.title,
        "createdAt": row.created_at.isoformat() if row.created_at else None,
        "updatedAt": row.updated_at.isoformat() if row.updated_at else None,
        "resourceId": row.resource_id,
        "current": here,
        "label": f"{row.title or row.thread_id}{' ← current' if here else ''}",
    }


def _threads(reach: _Reach, q: RecallQuery) -> dict[str, Any]:
    limit = normalize_limit(q.limit, DEFAULT_LIMIT, THREADS_MAX_LIMIT)
    page = max(0, q.page or 0)
    if reach.across and reach.resource_id is not None:
        rows = reach.deps.records.list_threads(
            reach.tenant,
            resource_id=reach.resource_id,
            profile=reach.profile,
            created_before=q.before,
            created_after=q.after,
            limit=limit + 1,
            offset=page * limit,
        )
    else:
        # the calling thread alone: one page, filtered by the same dates
        rows = (
            reach.deps.records.list_threads(
                reach.tenant,
                thread_ids=[reach.thread_id],
                created_before=q.before,
                created_after=q.after,
            )
            if page == 0
            else []
        )
    shown = rows[:limit]
    return {
        "mode": "threads",
        "page": page,
        "limit": limit,
        "count": len(shown),
        "hasMore": len(rows) > limit,
        "threads": [_thread_out(r, reach.thread_id) for r in shown],
    }


def _semantic_search(thread_id: str, q: RecallQuery, semantic: SemanticSearch) -> dict[str, Any]:
    """Observation groups ranked by meaning; each result's cursor is the first message of its range,
    which ``mode: messages`` pages from."""
    top_k = _search_top_k(q)
    results = (
        (
            hit.group.thread_id or "",
            {
                "cursor": hit.group.range_start,
                "range": f"{hit.group.range_start}:{hit.group.range_end}",
                "groupId": hit.group.group_id,
                "observedAt": hit.group.observed_at,
                "score": round(hit.score, 6),
                "preview": hit.group.text[:300],
            },
        )
        for hit in semantic(str(q.query), top_k)
    )
    return _search_answer(q, top_k, "vector", thread_id, results)


def _search(reach: _Reach, q: RecallQuery) -> dict[str, Any]:
    top_k = _search_top_k(q)
    whole_resource = reach.across and reach.resource_id is not None
    if reach.shared:
        streams, threads = [reach.stream_id], (None if whole_resource else [reach.thread_id])
    elif whole_resource:
        streams, threads = [reach.stream_of(r.thread_id) for r in reach.resource_threads()], None
    else:
        streams, threads = [reach.stream_id], None
    hits = reach.deps.messages.search_messages(
        reach.tenant, str(q.query), stream_ids=streams, thread_ids=threads, limit=top_k
    )
    results = (
        (
            hit.message.thread_id or "",
            {
                "cursor": hit.message.message_id,
                "role": hit.message.role,
                "createdAt": hit.message.created_at.isoformat(),
                "score": round(hit.score, 6),
                "preview": " ".join(
                    _part_text(p) for p in hit.message.message.get("parts", []) if isinstance(p, dict)
                )[:300],
            },
        )
        for hit in hits
    )
    return _search_answer(q, top_k, "fulltext", reach.thread_id, results)


def _search_top_k(q: RecallQuery) -> int:
    if not q.query or not q.query.strip():
        raise QueryRequiredError()
    return normalize_limit(q.limit, SEARCH_DEFAULT_TOP_K, SEARCH_MAX_TOP_K)


def _search_answer(
    q: RecallQuery, top_k: int, engine: str, thread_id: str, results: Iterable[tuple[str, dict[str, Any]]]
) -> dict[str, Any]:
    """The search answer: results grouped by thread, in rank order, the current thread marked; ``count`` is
    the number of results."""
    threads: dict[str, dict[str, Any]] = {}
    found = 0
    for tid, result in results:
        entry = threads.setdefault(tid, {"threadId": tid, "current": tid == thread_id, "results": []})
        entry["results"].append(result)
        found += 1
    return {
        "mode": "search",
        "query": q.query,
        "topK": top_k,
        "engine": engine,
        "count": found,
        "threads": list(threads.values()),
    }
