"""The MCP server's tools: their JSON Schemas and what each one calls (docs/integrations.md, MCP).

Every tool is one application use case, called as the HTTP route calls it, with the tenant the request's
key names. The ``recall`` tool's schema is the recall tool's own (``tool_schema()``, what
``GET /v1/tools/recall`` answers) with one property added, ``thread``; the other tools take their
properties from the same sources (recall's ``query``, the API's id rule), so the schemas cannot drift from
what the use cases accept.

A call names the thread its memory is read from or written to with ``thread``; without it, the thread the
connection set once in the ``X-OM-Thread-Id`` header (``om mcp --thread``). ``add_message`` names a new
thread's resource the same way (``resource``, else ``X-OM-Resource-Id``). Recall's own ``threadId`` keeps
its meaning: another thread of the calling thread's resource.

A tool answers a JSON object (``structuredContent``) and the same object as text, for clients that read only
the text; a refusal is a tool error carrying the service's ``code``, ``message`` and ``details``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

from om_api.formats import openai_messages
from om_api.schemas import ID_PATTERN, ID_RULE
from om_core.application.append import append_messages
from om_core.application.context import read_context
from om_core.application.deps import Deps
from om_core.application.history import observation_log
from om_core.application.recall import (
    RECALL_DESCRIPTION,
    SEARCH_DEFAULT_TOP_K,
    SEARCH_MAX_TOP_K,
    RecallQuery,
    recall,
    tool_schema,
)
from om_core.domain.message_input import MESSAGE_TEXT_LIMIT
from om_core.domain.state import RecordState

THREAD_HEADER = "X-OM-Thread-Id"
RESOURCE_HEADER = "X-OM-Resource-Id"
_ID = re.compile(ID_PATTERN)


class ToolRefusal(Exception):
    """A call refused before any use case runs (its arguments, or no thread to run on); answered as the
    API answers a 422."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}


@dataclass(frozen=True)
class Call:
    """One tool call: who makes it, the connection's defaults, and the arguments (validated)."""

    deps: Deps
    tenant: str
    arguments: Mapping[str, Any]
    default_thread: str | None = None
    default_resource: str | None = None

    @property
    def thread(self) -> str:
        named = self.arguments.get("thread") or self.default_thread
        if not named:
            raise ToolRefusal(
                "thread_required",
                f"name the thread: pass `thread`, or set the {THREAD_HEADER} header once for the "
                "connection (om mcp --thread)",
            )
        return checked_id(named, "thread" if self.arguments.get("thread") else THREAD_HEADER)

    @property
    def resource(self) -> str | None:
        named = self.arguments.get("resource") or self.default_resource
        return None if named is None else checked_id(named, RESOURCE_HEADER)


def checked_id(value: str, where: str) -> str:
    """A thread or resource id from a header, held to the rule the schemas hold arguments to."""
    if _ID.fullmatch(value) is None:
        raise ToolRefusal(
            "invalid_id", f"{where} {value!r} is not a valid id: {ID_RULE}", {"value": value, "rule": ID_RULE}
        )
    return value


def _id_property(description: str) -> dict[str, Any]:
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": 256,
        "pattern": ID_PATTERN,
        "description": description,
    }


THREAD_PROPERTY = _id_property(
    f"the thread (conversation) whose memory this call uses; default: the connection's {THREAD_HEADER} header"
)
RESOURCE_PROPERTY = _id_property(
    f"the resource (user, project) a new thread belongs to; default: the connection's {RESOURCE_HEADER} "
    "header"
)


def _recall_parameters() -> dict[str, Any]:
    parameters: dict[str, Any] = copy.deepcopy(tool_schema()["function"]["parameters"])
    parameters["properties"]["thread"] = THREAD_PROPERTY
    return parameters


# RecallQuery's fields by the names the recall tool's schema gives them (threadId, partIndex, …)
_RECALL_FIELDS = {
    re.sub(r"_([a-z])", lambda m: m.group(1).upper(), f.name): f.name for f in fields(RecallQuery)
}


def _moment(value: str, name: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ToolRefusal(
            "validation_error", f"{name}: {value!r} is not a date-time (ISO 8601)", {"argument": name}
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def recall_query(arguments: Mapping[str, Any], **fixed: Any) -> RecallQuery:
    values: dict[str, Any] = {}
    for name, value in arguments.items():
        field = _RECALL_FIELDS.get(name)
        if field is None:
            continue
        values[field] = _moment(value, name) if field in ("before", "after") else value
    return RecallQuery(**{**values, **fixed})


def _recall(call: Call) -> dict[str, Any]:
    return recall(call.deps, tenant=call.tenant, thread_id=call.thread, query=recall_query(call.arguments))


def _search(call: Call) -> dict[str, Any]:
    query = recall_query(
        {"query": call.arguments["query"], "limit": call.arguments.get("limit")}, mode="search"
    )
    return recall(call.deps, tenant=call.tenant, thread_id=call.thread, query=query)


def observations_json(thread_id: str, current: RecordState, shown: RecordState) -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "generation": shown.generation,
        "currentGeneration": current.generation,
        "version": shown.version,
        "observationTokens": shown.observation_tokens,
        "observations": shown.log_text(),
        "bufferedChunks": len(shown.chunks),
    }


def _observations(call: Call) -> dict[str, Any]:
    thread = call.thread
    found = observation_log(
        call.deps, tenant=call.tenant, thread_id=thread, generation=call.arguments.get("generation")
    )
    return observations_json(thread, found.current, found.shown)


def _add_message(call: Call) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": call.arguments.get("role", "user"),
        "parts": [{"type": "text", "text": call.arguments["content"]}],
    }
    if call.arguments.get("id"):
        message["id"] = call.arguments["id"]
    thread = call.thread
    outcome = append_messages(
        call.deps, tenant=call.tenant, thread_id=thread, messages=[message], resource_id=call.resource
    )
    return {
        "threadId": thread,
        "version": outcome.version,
        "stored": [{"id": a.message_id, "seq": a.seq, "tokens": a.tokens} for a in outcome.appended],
        "duplicates": outcome.duplicates,
    }


def context_json(call: Call) -> dict[str, Any]:
    """The context to send the model: om's memory and the unobserved messages, as chat messages."""
    thread = call.thread
    window = read_context(
        call.deps, tenant=call.tenant, thread_id=thread, caller_model=call.arguments.get("model")
    ).window
    return {
        "threadId": thread,
        "version": window.version,
        "messages": openai_messages(window),
        "observationTokens": window.observation_tokens,
        "pendingTokens": window.pending_tokens,
    }


@dataclass(frozen=True)
class ToolDefinition:
    name: str
    description: str
    input_schema: dict[str, Any]
    run: Callable[[Call], dict[str, Any]]
    read_only: bool = True

    def __post_init__(self) -> None:
        Draft202012Validator.check_schema(self.input_schema)

    def validate(self, arguments: Mapping[str, Any]) -> None:
        validator = Draft202012Validator(self.input_schema, format_checker=FormatChecker())
        problems = sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.absolute_path))
        if problems:
            errors = [
                {"argument": ".".join(str(p) for p in e.absolute_path) or None, "message": e.message}
                for e in problems
            ]
            raise ToolRefusal(
                "validation_error",
                f"the arguments do not match the {self.name} tool's schema: {problems[0].message}",
                {"errors": errors},
            )


def _object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


TOOLS: tuple[ToolDefinition, ...] = (
    ToolDefinition("recall", RECALL_DESCRIPTION, _recall_parameters(), _recall),
    ToolDefinition(
        "search_memory",
        "Search this conversation's memory for what was said: by meaning among the observations when the "
        "memory keeps a vector index, else the messages by words. Each result's `cursor` is where `recall` "
        "reads the original messages.",
        _object(
            {
                "query": tool_schema()["function"]["parameters"]["properties"]["query"],
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": SEARCH_MAX_TOP_K,
                    "default": SEARCH_DEFAULT_TOP_K,
                    "description": "how many results",
                },
                "thread": THREAD_PROPERTY,
            },
            ["query"],
        ),
        _search,
    ),
    ToolDefinition(
        "get_observations",
        "The thread's observation log: the dated notes om's Observer kept of the conversation, condensed "
        "by its Reflector into generations. `generation` reads an earlier generation's log (0 is the first).",
        _object(
            {
                "generation": {"type": "integer", "minimum": 0, "maximum": 1_000_000},
                "thread": THREAD_PROPERTY,
            }
        ),
        _observations,
    ),
    ToolDefinition(
        "add_message",
        "Store a message in the thread's memory: what the user said (role user, the default), a reply "
        "(assistant), or a note to remember. om observes it like every other message; an `id` makes the "
        "call safe to repeat.",
        _object(
            {
                "content": {"type": "string", "minLength": 1, "maxLength": MESSAGE_TEXT_LIMIT},
                "role": {"type": "string", "enum": ["user", "assistant"], "default": "user"},
                "id": _id_property("the message's id: a repeated call with the same id stores it once"),
                "thread": THREAD_PROPERTY,
                "resource": RESOURCE_PROPERTY,
            },
            ["content"],
        ),
        _add_message,
        read_only=False,
    ),
    ToolDefinition(
        "get_context",
        "The context to send the model for this thread: om's memory (observations and instructions) as "
        "system messages, then the messages not observed yet, as chat-completions messages.",
        _object(
            {
                "model": {
                    "type": "string",
                    "maxLength": 200,
                    "description": "the model it will be sent to (token counts of images and files)",
                },
                "thread": THREAD_PROPERTY,
            }
        ),
        context_json,
    ),
)
TOOLS_BY_NAME = {tool.name: tool for tool in TOOLS}


def as_text(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1)
