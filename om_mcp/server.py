"""The MCP server on the official SDK's low-level ``Server``: the tools of ``om_mcp/tools.py``, the
observation logs and contexts as resources, and a ``context`` prompt.

The low-level server, not ``MCPServer``, because the tools' input schemas are the service's own JSON
Schemas (recall's from ``tool_schema()``), which ``MCPServer`` would derive from Python signatures instead;
arguments are validated against those schemas here, before any use case runs.

A handler finds what it runs with on the HTTP request the SDK hands it: the app's ``Deps`` and the tenant
the endpoint (``om_mcp/http.py``) authenticated, in the request's state. Use cases are synchronous (the
store is), so they run on a worker thread, as FastAPI runs the routes. What a use case raises is answered
as the HTTP API answers it: the app's own exception handlers give the status, code, message and details.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, TypeVar
from urllib.parse import quote, unquote

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from om_core.application.deps import Deps
from om_core.application.history import observation_log
from om_core.application.threads import threads_of
from om_mcp.tools import (
    RESOURCE_HEADER,
    THREAD_HEADER,
    THREAD_PROPERTY,
    TOOLS,
    TOOLS_BY_NAME,
    Call,
    ToolRefusal,
    as_text,
    checked_id,
    context_json,
    observations_json,
)

log = logging.getLogger("om_mcp")

SERVER_NAME = "om"
INSTRUCTIONS = (
    "om is this conversation's long-term memory (Observational Memory). Call get_context for what to send "
    "the model, recall or search_memory to read back what was said, get_observations for the observation "
    "log, add_message to store a message or a note. Calls name their thread with `thread`, else the "
    f"connection's {THREAD_HEADER} header."
)
RESOURCES_LISTED = 100
_URI = re.compile(
    r"^om://threads/(?P<thread>[^/]+)/(?:(?P<context>context)|observations(?:/(?P<generation>\d+))?)$"
)

T = TypeVar("T")
Context = ServerRequestContext[Any, Any]


class Caller:
    """The HTTP request a message came in, and what the endpoint put in its state."""

    def __init__(self, ctx: Context) -> None:
        request = ctx.request
        if not isinstance(request, Request):
            raise RuntimeError("om's MCP server answers over HTTP only (om mcp bridges stdio to it)")
        self.request = request
        self.deps: Deps = request.app.state.deps
        self.tenant: str = request.state.om_tenant
        self.thread = request.headers.get(THREAD_HEADER)
        self.resource = request.headers.get(RESOURCE_HEADER)

    def call(self, arguments: Mapping[str, Any]) -> Call:
        return Call(self.deps, self.tenant, arguments, self.thread or None, self.resource or None)

    async def run(self, work: Callable[[], T]) -> T:
        return await run_in_threadpool(work)


async def service_error(request: Request, error: Exception) -> dict[str, Any] | None:
    """The API's answer to ``error`` (status, code, message, details) from the app's own exception
    handlers; None when no handler answers it (a bug)."""
    if isinstance(error, ToolRefusal):
        return {"status": 422, "code": error.code, "message": error.message, "details": error.details}
    handlers: Mapping[Any, Callable[[Request, Exception], Awaitable[Any]]] = request.app.exception_handlers
    handler = next((handlers[k] for k in type(error).__mro__ if k in handlers and k is not Exception), None)
    if handler is None:
        return None
    try:
        response = await handler(request, error)
    except Exception:
        # a handler that re-raises leaves the error unanswered: the API would answer it with a 500
        return None
    body = json.loads(response.body)["error"]
    return {"status": response.status_code, **body}


def _unexpected(error: Exception) -> dict[str, Any]:
    log.error("unexpected error in an MCP call", exc_info=error)
    return {
        "status": 500,
        "code": "internal_error",
        "message": "internal error; it has been logged",
        "details": {},
    }


async def _answer(caller: Caller, error: Exception) -> dict[str, Any]:
    return await service_error(caller.request, error) or _unexpected(error)


def _tool(definition: Any) -> types.Tool:
    return types.Tool(
        name=definition.name,
        description=definition.description,
        input_schema=definition.input_schema,
        annotations=types.ToolAnnotations(read_only_hint=definition.read_only, open_world_hint=False),
    )


async def list_tools(ctx: Context, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[_tool(t) for t in TOOLS])


def _tool_result(value: dict[str, Any], *, error: bool = False) -> types.CallToolResult:
    if error:
        text = f"{value['code']}: {value['message']}"
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content={"error": value},
            is_error=True,
        )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=as_text(value))], structured_content=value
    )


async def call_tool(ctx: Context, params: types.CallToolRequestParams) -> types.CallToolResult:
    caller = Caller(ctx)
    definition = TOOLS_BY_NAME.get(params.name)
    if definition is None:
        return _tool_result(
            {"status": 404, "code": "unknown_tool", "message": f"no tool {params.name!r}", "details": {}},
            error=True,
        )
    arguments = dict(params.arguments or {})
    try:
        definition.validate(arguments)
        call = caller.call(arguments)
        return _tool_result(await caller.run(lambda: definition.run(call)))
    except Exception as error:
        return _tool_result(await _answer(caller, error), error=True)


def _uri(thread: str, tail: str) -> str:
    return f"om://threads/{quote(thread, safe='')}/{tail}"


TEMPLATES = [
    types.ResourceTemplate(
        name="observations",
        uri_template="om://threads/{thread}/observations",
        description="The thread's observation log (its current generation).",
        mime_type="text/plain",
    ),
    types.ResourceTemplate(
        name="observations-of-generation",
        uri_template="om://threads/{thread}/observations/{generation}",
        description="The observation log as generation N ended (0 is the first).",
        mime_type="text/plain",
    ),
    types.ResourceTemplate(
        name="context",
        uri_template="om://threads/{thread}/context",
        description="The context to send the model: om's memory and the unobserved messages (JSON).",
        mime_type="application/json",
    ),
]


async def list_resource_templates(
    ctx: Context, params: types.PaginatedRequestParams | None
) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(resource_templates=TEMPLATES)


async def list_resources(
    ctx: Context, params: types.PaginatedRequestParams | None
) -> types.ListResourcesResult:
    """The observation logs of the tenant's most recently updated threads."""
    caller = Caller(ctx)
    try:
        rows = await caller.run(lambda: threads_of(caller.deps, tenant=caller.tenant, limit=RESOURCES_LISTED))
    except Exception as error:
        raise _rpc_error(await _answer(caller, error)) from None
    return types.ListResourcesResult(
        resources=[
            types.Resource(
                name=f"observations of {row.title or row.thread_id}",
                uri=_uri(row.thread_id, "observations"),
                mime_type="text/plain",
            )
            for row in rows
        ]
    )


def _rpc_error(answer: dict[str, Any]) -> MCPError:
    code = types.INVALID_PARAMS if answer["status"] < 500 else types.INTERNAL_ERROR
    data = {"code": answer["code"], "status": answer["status"], "details": answer.get("details", {})}
    return MCPError(code=code, message=f"{answer['code']}: {answer['message']}", data=data)


def _read(caller: Caller, uri: str) -> tuple[str, str]:
    match = _URI.fullmatch(uri)
    if match is None:
        raise ToolRefusal(
            "unknown_resource",
            f"no resource {uri!r}: om's are om://threads/<thread>/observations[/<generation>] and "
            "om://threads/<thread>/context",
            {"uri": uri},
        )
    thread = checked_id(unquote(match["thread"]), "the resource's thread")
    if match["context"]:
        return "application/json", as_text(context_json(Call(caller.deps, caller.tenant, {"thread": thread})))
    generation = int(match["generation"]) if match["generation"] is not None else None
    found = observation_log(caller.deps, tenant=caller.tenant, thread_id=thread, generation=generation)
    return "text/plain", observations_json(thread, found.current, found.shown)["observations"]


async def read_resource(ctx: Context, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    caller = Caller(ctx)
    try:
        mime_type, text = await caller.run(lambda: _read(caller, params.uri))
    except Exception as error:
        raise _rpc_error(await _answer(caller, error)) from None
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=params.uri, mime_type=mime_type, text=text)]
    )


CONTEXT_PROMPT = types.Prompt(
    name="context",
    description=(
        "The thread's context, to send the model: first om's memory (observations and instructions), then "
        "the messages it has not observed yet."
    ),
    arguments=[
        types.PromptArgument(name="thread", description=THREAD_PROPERTY["description"], required=False)
    ],
)


async def list_prompts(ctx: Context, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=[CONTEXT_PROMPT])


def _prompt_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    text = content or ""
    if message.get("tool_calls"):
        text += "\n" + json.dumps(message["tool_calls"], ensure_ascii=False)
    if message.get("role") == "tool":
        text = f"[tool result {message.get('tool_call_id')}] {text}"
    return str(text)


def prompt_messages(context: Mapping[str, Any]) -> list[types.PromptMessage]:
    """The context's chat messages as prompt messages, which have only the user and assistant roles: the
    system messages (om's memory) become the first user message."""
    chat = context["messages"]
    memory = "\n\n".join(_prompt_text(m) for m in chat if m.get("role") == "system")
    out: list[types.PromptMessage] = []
    if memory:
        out.append(types.PromptMessage(role="user", content=types.TextContent(type="text", text=memory)))
    for message in chat:
        if message.get("role") == "system":
            continue
        role: Literal["user", "assistant"] = "assistant" if message.get("role") == "assistant" else "user"
        text = _prompt_text(message)
        if text:
            out.append(types.PromptMessage(role=role, content=types.TextContent(type="text", text=text)))
    return out


async def get_prompt(ctx: Context, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    caller = Caller(ctx)
    if params.name != CONTEXT_PROMPT.name:
        raise MCPError(code=types.INVALID_PARAMS, message=f"no prompt {params.name!r}")
    arguments = {k: v for k, v in (params.arguments or {}).items() if k == "thread" and v}
    try:
        context = await caller.run(lambda: context_json(caller.call(arguments)))
    except Exception as error:
        raise _rpc_error(await _answer(caller, error)) from None
    return types.GetPromptResult(
        description=f"om's context for thread {context['threadId']!r} (version {context['version']})",
        messages=prompt_messages(context),
    )


def build_server(version: str) -> Server[Any]:
    return Server(
        SERVER_NAME,
        version=version,
        title="om — Observational Memory",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=lambda name: t.input_schema if (t := TOOLS_BY_NAME.get(name)) else None,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )
