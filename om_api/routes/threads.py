"""``/v1/threads/{thread_id}…``: thin handlers over the use cases (docs/api.md, Endpoints).

Handlers are plain functions (FastAPI runs them in its thread pool) because the use cases and the store
are synchronous. Each one resolves the tenant from the key, calls one use case, and shapes the answer.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Header, Path, Query, Request, Response
from fastapi.responses import StreamingResponse

from om_api.auth import Tenant
from om_api.deps import DepsDep, ModelCheckDep
from om_api.encoding import json_response
from om_api.errors import ApiError
from om_api.formats import openai_messages
from om_api.json_body import JsonBodyRoute
from om_api.schemas import (
    ID_PATTERN,
    AppendOut,
    ContextOut,
    CycleIn,
    CycleOut,
    ErrorBody,
    EventsOut,
    MessagesIn,
    ObservationsOut,
    OpenAIContextOut,
    OpenAITurnOut,
    RecallOut,
    Thread,
    ThreadIn,
    ThreadsOut,
    TurnOut,
)
from om_api.sse import event_stream
from om_core.application.append import AppendOutcome, append_messages, configure_thread
from om_core.application.context import ContextRead, read_context
from om_core.application.deps import Deps
from om_core.application.erase import erase_thread
from om_core.application.history import observation_log, read_events
from om_core.application.manual import observe_now, reflect_now
from om_core.application.parts import append_parts, parts_since, status_of
from om_core.application.ports import ThreadRow
from om_core.application.profiles import DEFAULT_PROFILE, config_of
from om_core.application.recall import RecallQuery, recall
from om_core.application.threads import (
    ThreadView,
    describe_thread,
    record_head,
    record_state,
    record_status,
    thread_updated_at,
    threads_of,
)
from om_core.application.turn import take_turn
from om_core.application.working_memory import read_working_memory

router = APIRouter(prefix="/v1/threads", tags=["threads"], route_class=JsonBodyRoute)

ThreadId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=256,
        pattern=ID_PATTERN,
        description="1–256 ASCII letters, digits and . _ : @ ~ + = - (starting with a letter or digit)",
    ),
]

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 404, 409, 413, 415, 422, 429, 503)
}


def _thread_json(view: ThreadView) -> dict[str, Any]:
    return {
        "thread_id": view.thread_id,
        "resource_id": view.resource_id,
        "title": view.title,
        "metadata": view.metadata,
        "config": view.config,
        "version": view.version,
        "profile": view.profile,
        "updated_at": view.updated_at,
        "models": view.models,
    }


def threads_json(rows: list[ThreadRow]) -> dict[str, Any]:
    return {
        "threads": [
            {
                "thread_id": r.thread_id,
                "resource_id": r.resource_id,
                "title": r.title,
                "metadata": r.metadata,
                "config": r.config,
                "version": r.version,
                "profile": r.profile or DEFAULT_PROFILE,
                "updated_at": r.updated_at.isoformat() if r.updated_at else None,
            }
            for r in rows
        ]
    }


def _within_stream(deps: Deps, tenant: str, thread_id: str, at_version: int) -> None:
    """A version past the stream's head is refused: a replay would stop at the head and answer it."""
    version = record_head(deps, tenant=tenant, thread_id=thread_id).version
    if at_version > version:
        raise ApiError(
            422,
            "version_out_of_range",
            f"at_version {at_version} is past the thread's history: its current version is {version}",
            {"at_version": at_version, "version": version},
        )


@router.get("", response_model=ThreadsOut, responses=_ERRORS, summary="the tenant's threads")
def list_threads(
    deps: DepsDep,
    tenant: Tenant,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> dict[str, Any]:
    return threads_json(threads_of(deps, tenant=tenant, limit=limit, offset=offset))


@router.put("/{thread_id}", response_model=Thread, responses=_ERRORS, summary="create or update a thread")
def put_thread(
    thread_id: ThreadId, body: ThreadIn, deps: DepsDep, tenant: Tenant, check_models: ModelCheckDep
) -> dict[str, Any]:
    state = configure_thread(
        deps,
        tenant=tenant,
        thread_id=thread_id,
        resource_id=body.resource_id,
        title=body.title,
        metadata=body.metadata,
        config=body.config,
        profile=body.profile,
        check_models=check_models,
    )
    updated_at = thread_updated_at(deps, tenant=tenant, thread_id=thread_id)
    return _thread_json(ThreadView.of(state, thread_id, config_of(deps, state), updated_at=updated_at))


@router.get("/{thread_id}", response_model=Thread, responses=_ERRORS, summary="a thread")
def get_thread(thread_id: ThreadId, deps: DepsDep, tenant: Tenant) -> dict[str, Any]:
    return _thread_json(describe_thread(deps, tenant=tenant, thread_id=thread_id))


@router.delete("/{thread_id}", status_code=204, responses=_ERRORS, summary="erase the thread and its events")
def delete_thread(thread_id: ThreadId, deps: DepsDep, tenant: Tenant) -> Response:
    erase_thread(deps, tenant=tenant, thread_id=thread_id)
    return Response(status_code=204)


@router.post("/{thread_id}/messages", response_model=AppendOut, responses=_ERRORS, summary="append messages")
def post_messages(
    thread_id: ThreadId,
    body: MessagesIn,
    deps: DepsDep,
    tenant: Tenant,
    model: Annotated[
        str | None, Query(max_length=200, description="the caller's model (image and file token counts)")
    ] = None,
) -> Response:
    outcome = append_messages(
        deps,
        tenant=tenant,
        thread_id=thread_id,
        messages=body.messages,
        resource_id=body.resource_id,
        caller_model=model,
        profile=body.profile,
    )
    parts = append_parts(deps, outcome, thread_id=thread_id)
    return json_response(
        {
            "thread_id": thread_id,
            "version": outcome.version,
            "appended": _appended_json(outcome),
            "duplicates": outcome.duplicates,
            "status": parts[-1]["data"],
            "parts": parts,
        }
    )


def _appended_json(outcome: AppendOutcome) -> list[dict[str, Any]]:
    return [{"message_id": a.message_id, "seq": a.seq, "tokens": a.tokens} for a in outcome.appended]


# the caller's providerOptions.openai.promptCacheRetention, which activateAfterIdle "auto" follows
CallerModel = Annotated[
    str | None, Query(max_length=200, description="the caller's model (provider change, TTL, token counts)")
]
ContextFormat = Annotated[Literal["om", "openai"], Query(description="openai: a chat-completions list")]
Wait = Annotated[bool, Query(description="false: never block on synchronous work")]
CacheRetention = Annotated[
    Literal["in_memory", "24h"] | None,
    Query(description='the caller\'s OpenAI promptCacheRetention ("auto" idle TTL)'),
]


def _caller_provider_options(retention: str | None) -> dict[str, Any] | None:
    return None if retention is None else {"openai": {"promptCacheRetention": retention}}


@router.get(
    "/{thread_id}/context",
    response_model=ContextOut | OpenAIContextOut,
    responses=_ERRORS,
    summary="the projected context window",
)
def get_thread_context(
    thread_id: ThreadId,
    deps: DepsDep,
    tenant: Tenant,
    model: CallerModel = None,
    format: ContextFormat = "om",
    at_version: Annotated[
        int | None, Query(ge=1, le=2**53, description="time travel: as of version N")
    ] = None,
    wait: Wait = True,
    prompt_cache_retention: CacheRetention = None,
) -> Response:
    if at_version is not None:
        _within_stream(deps, tenant, thread_id, at_version)
    read = read_context(
        deps,
        tenant=tenant,
        thread_id=thread_id,
        caller_model=model,
        at_version=at_version,
        wait=wait,
        caller_provider_options=_caller_provider_options(prompt_cache_retention),
    )
    return _context_answer(deps, thread_id, read, format)


@router.post(
    "/{thread_id}/turn",
    response_model=TurnOut | OpenAITurnOut,
    responses=_ERRORS,
    summary="append the turn's messages and return the context, in one request",
)
def post_turn(
    thread_id: ThreadId,
    body: MessagesIn,
    deps: DepsDep,
    tenant: Tenant,
    model: CallerModel = None,
    format: ContextFormat = "om",
    wait: Wait = True,
    prompt_cache_retention: CacheRetention = None,
) -> Response:
    turn = take_turn(
        deps,
        tenant=tenant,
        thread_id=thread_id,
        messages=body.messages,
        resource_id=body.resource_id,
        caller_model=model,
        profile=body.profile,
        wait=wait,
        caller_provider_options=_caller_provider_options(prompt_cache_retention),
    )
    appended = turn.appended
    # the append's parts without its status: the read's status closes the list
    before = append_parts(deps, appended, status=False)
    extra = {
        "appended": [
            {"message_id": a.message_id, "seq": a.seq, "tokens": a.tokens} for a in appended.appended
        ],
        "duplicates": appended.duplicates,
    }
    return _context_answer(deps, thread_id, turn.read, format, before=before, extra=extra)


def _context_answer(
    deps: Deps,
    thread_id: str,
    read: ContextRead,
    format: Literal["om", "openai"],
    *,
    before: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
) -> Response:
    window, stream_id = read.window, read.stream_id
    # what this read caused (activations, a synchronous cycle)
    parts = parts_since(deps, read.found, window.version) if read.found is not None else []
    status = {"type": "data-om-status", "id": f"om-status:{stream_id}", "data": window.status}
    common = {
        "thread_id": thread_id,
        "version": window.version,
        **(extra or {}),
        "status": window.status,
        "warnings": window.warnings,
        "parts": [*(before or []), *parts, status],
    }
    if format == "openai":
        return json_response({**common, "messages": openai_messages(window)})
    return json_response(
        {
            **common,
            "system": window.system,
            "continuation": window.continuation,
            "pending_tokens": window.pending_tokens,
            "observation_tokens": window.observation_tokens,
        },
        embedded={"messages": window.message_json},
    )


@router.get(
    "/{thread_id}/status",
    response_model=dict[str, Any],
    responses=_ERRORS,
    summary="the data-om-status object",
)
def get_status(thread_id: ThreadId, deps: DepsDep, tenant: Tenant) -> dict[str, Any]:
    return record_status(deps, tenant=tenant, thread_id=thread_id)


@router.get(
    "/{thread_id}/working-memory",
    response_model=dict[str, Any],
    responses=_ERRORS,
    summary="the working-memory document the Observer keeps",
)
def get_working_memory(thread_id: ThreadId, deps: DepsDep, tenant: Tenant) -> dict[str, Any]:
    return read_working_memory(deps, tenant=tenant, thread_id=thread_id).to_json()


@router.get("/{thread_id}/events", response_model=EventsOut, responses=_ERRORS, summary="replay the stream")
def get_events(
    thread_id: ThreadId,
    deps: DepsDep,
    tenant: Tenant,
    after: Annotated[int, Query(ge=0, le=2**53, description="stream version to start after")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    types: Annotated[str | None, Query(max_length=2000, description="comma-separated event types")] = None,
) -> dict[str, Any]:
    wanted = {t.strip() for t in types.split(",") if t.strip()} if types else None
    page = read_events(deps, tenant=tenant, thread_id=thread_id, after=after, limit=limit, types=wanted)
    return {
        "thread_id": thread_id,
        "events": [
            {
                "position": recorded.global_position,
                "version": recorded.stream_version,
                "type": recorded.event_type,
                "schema_version": recorded.schema_version,
                "data": recorded.data,
                "metadata": recorded.metadata,
                "time": recorded.recorded_at.isoformat(),
            }
            for recorded in page.events
        ],
        "next_after": page.next_after,
    }


@router.get(
    "/{thread_id}/stream",
    responses={**_ERRORS, 200: {"content": {"text/event-stream": {}}, "description": "data-om-* parts"}},
    summary="live data-om-* parts (server-sent events)",
    response_class=StreamingResponse,
)
def stream(
    thread_id: ThreadId,
    request: Request,
    deps: DepsDep,
    tenant: Tenant,
    last_event_id: Annotated[str | None, Header(max_length=40)] = None,
) -> StreamingResponse:
    stream_id = record_head(deps, tenant=tenant, thread_id=thread_id).stream_id
    position: int | None = None
    if last_event_id is not None and last_event_id.strip():
        try:
            position = int(last_event_id.strip())
        except ValueError:
            raise ApiError(
                400, "invalid_last_event_id", "Last-Event-ID must be a global position (integer)"
            ) from None
        if position < 0:
            raise ApiError(400, "invalid_last_event_id", "Last-Event-ID must not be negative")
    body = event_stream(
        deps,
        stream_id,
        last_position=position,
        is_disconnected=request.is_disconnected,
        poll_interval=request.app.state.sse_poll_interval,
        heartbeat_interval=request.app.state.sse_heartbeat_interval,
        thread_id=thread_id,
    )
    return StreamingResponse(
        body,
        media_type="text/event-stream",
        headers={
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
            "x-vercel-ai-ui-message-stream": "v1",
        },
    )


@router.get(
    "/{thread_id}/observations",
    response_model=ObservationsOut,
    responses=_ERRORS,
    summary="observation log, buffered work, generations",
)
def get_observations(
    thread_id: ThreadId,
    deps: DepsDep,
    tenant: Tenant,
    generation: Annotated[
        int | None, Query(ge=0, le=1_000_000, description="an earlier generation's log")
    ] = None,
) -> dict[str, Any]:
    found = observation_log(deps, tenant=tenant, thread_id=thread_id, generation=generation)
    state, shown = found.current, found.shown
    return {
        "thread_id": thread_id,
        "version": shown.version,
        "generation": shown.generation,
        "observation_tokens": shown.observation_tokens,
        "log": [s.model_dump(mode="json") for s in shown.log],
        "buffered_chunks": [c.model_dump(mode="json") for c in shown.chunks],
        "buffered_reflection": shown.buffered_reflection.model_dump(mode="json")
        if shown.buffered_reflection
        else None,
        "generations": [g.model_dump(mode="json") for g in state.generations],
        "in_flight": {
            "buffer": shown.buffer_in_flight.model_dump(mode="json") if shown.buffer_in_flight else None,
            "sync_observation": shown.sync_in_flight.model_dump(mode="json")
            if shown.sync_in_flight
            else None,
            "reflection": shown.reflection_in_flight.model_dump(mode="json")
            if shown.reflection_in_flight
            else None,
        },
        "current_task": shown.current_task,
        "suggested_response": shown.suggested_response,
        "stats": shown.stats.model_dump(mode="json"),
    }


def _cycle(
    deps: Deps, tenant: str, thread_id: str, kind: Literal["observe", "reflect"], wait: bool
) -> dict[str, Any]:
    before = record_state(deps, tenant=tenant, thread_id=thread_id)
    run = observe_now if kind == "observe" else reflect_now
    outcome = run(deps, tenant=tenant, thread_id=thread_id, wait=wait)
    state = outcome.state
    parts = parts_since(deps, before, state.version)
    status = status_of(deps, state, thread_id=thread_id)
    return {
        "thread_id": thread_id,
        "cycle_id": outcome.cycle_id,
        "outcome": outcome.outcome,
        "version": state.version,
        "status": status["data"],
        "parts": [*parts, status],
    }


@router.post("/{thread_id}/observe", response_model=CycleOut, responses=_ERRORS, summary="observe now")
def post_observe(
    thread_id: ThreadId, deps: DepsDep, tenant: Tenant, body: Annotated[CycleIn | None, Body()] = None
) -> dict[str, Any]:
    return _cycle(deps, tenant, thread_id, "observe", (body or CycleIn()).wait)


@router.post("/{thread_id}/reflect", response_model=CycleOut, responses=_ERRORS, summary="reflect now")
def post_reflect(
    thread_id: ThreadId, deps: DepsDep, tenant: Tenant, body: Annotated[CycleIn | None, Body()] = None
) -> dict[str, Any]:
    return _cycle(deps, tenant, thread_id, "reflect", (body or CycleIn()).wait)


@router.get("/{thread_id}/recall", response_model=RecallOut, responses=_ERRORS, summary="the recall tool")
def get_recall(
    thread_id: ThreadId,
    deps: DepsDep,
    tenant: Tenant,
    mode: Literal["messages", "threads", "search"] = "messages",
    query: Annotated[str | None, Query(max_length=1000)] = None,
    cursor: Annotated[str | None, Query(max_length=600)] = None,
    recall_thread_id: Annotated[str | None, Query(alias="thread_id", max_length=256)] = None,
    anchor: Literal["start", "end"] = "start",
    page: Annotated[
        int | None, Query(ge=-1_000_000, le=1_000_000, description="messages: 1 by default; threads: from 0")
    ] = None,
    limit: Annotated[int | None, Query(ge=-1_000_000, le=1_000_000)] = None,
    detail: Literal["low", "high"] = "low",
    part_type: Annotated[str | None, Query(max_length=100)] = None,
    tool_name: Annotated[str | None, Query(max_length=200)] = None,
    part_index: Annotated[int | None, Query(ge=0, le=100_000)] = None,
    char_offset: Annotated[int, Query(ge=0, le=100_000_000)] = 0,
    before: datetime | None = None,
    after: datetime | None = None,
) -> dict[str, Any]:
    q = RecallQuery(
        mode=mode,
        query=query,
        cursor=cursor,
        thread_id=recall_thread_id,
        anchor=anchor,
        page=page,
        limit=limit,
        detail=detail,
        part_type=part_type,
        tool_name=tool_name,
        part_index=part_index,
        char_offset=char_offset,
        before=_utc(before),
        after=_utc(after),
    )
    return recall(deps, tenant=tenant, thread_id=thread_id, query=q)


def _utc(moment: datetime | None) -> datetime | None:
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)
