"""``/v1/threads/{thread_id}…``: thin handlers over the use cases (docs/api.md, Endpoints).

Handlers are plain functions (FastAPI runs them in its thread pool) because the use cases and the store
are synchronous. Each one resolves the tenant from the key, calls one use case, and shapes the answer.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Header, Path, Query, Request, Response
from fastapi.responses import StreamingResponse

from om_api import queries
from om_api.auth import Tenant
from om_api.deps import DepsDep
from om_api.encoding import json_response
from om_api.errors import ApiError, not_found
from om_api.formats import openai_messages
from om_api.recall import RecallQuery, SemanticSearch, recall
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
    RecallOut,
    Thread,
    ThreadIn,
    ThreadsOut,
)
from om_api.sse import event_stream
from om_core.application.append import append_messages, configure_thread
from om_core.application.configuration import counter_for, record_config
from om_core.application.context import read_context
from om_core.application.deps import Deps
from om_core.application.erase import erase_thread
from om_core.application.manual import observe_now, reflect_now
from om_core.application.repository import load_state, replay_state
from om_core.application.streams import (
    RecordNotFoundError,
    ResourceRequiredError,
    record_stream_for,
    thread_stream_id,
)
from om_core.application.vector_index import GroupHit, search_observations, vector_index_enabled
from om_core.bootstrap import check_thread_models
from om_core.domain.context import build_status, om_metadata
from om_core.domain.events import EVENT_CLASSES, DomainEvent, from_recorded
from om_core.domain.parts import event_parts, parts_for_events, status_part
from om_core.domain.state import RecordState

router = APIRouter(prefix="/v1/threads", tags=["threads"])

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


def _existing(deps: Deps, tenant: str, thread_id: str) -> RecordState:
    state = load_state(deps.store, thread_stream_id(tenant, thread_id), deps.states)
    if state.version == 0:
        raise not_found(thread_id)
    return state


def _thread_json(state: RecordState, thread_id: str, deps: Deps | None = None) -> dict[str, Any]:
    metadata = dict(state.thread_metadata)
    if deps is not None:
        om = om_metadata(state, record_config(deps.profile, state))
        if om:
            mastra = metadata.get("mastra")
            metadata["mastra"] = {**(mastra if isinstance(mastra, dict) else {}), "om": om}
    return {
        "thread_id": state.thread_id or thread_id,
        "resource_id": state.resource_id,
        "title": state.title,
        "metadata": metadata,
        "config": state.config_overrides,
        "version": state.version,
    }


def _emitted(
    deps: Deps, events: list[DomainEvent], after: RecordState, prior: tuple[int, RecordState] | None
) -> list[dict[str, Any]]:
    """The lifecycle parts of events a request just committed (status parts are added by the caller).

    Parts that describe an event relative to the state before it (activations, results) start from the
    state the use case kept just before the first such event, so no request replays the stream.
    """
    if not events:
        return []
    config = record_config(deps.profile, after)
    cut = prior[0] if prior is not None else len(events)
    parts = [p for e in events[:cut] for p in event_parts(e, None, after, config)]
    if prior is not None:
        parts.extend(
            p
            for _, batch in parts_for_events(prior[1], events[cut:], config, status_after_each=False)
            for p in batch
        )
    return parts


def _parts_since(deps: Deps, before: RecordState, stream_id: str, version: int) -> list[dict[str, Any]]:
    """The parts of what was committed after ``before`` up to ``version``, folded forward from it."""
    if version <= before.version:
        return []
    recorded = deps.store.read_stream(stream_id, after_version=before.version, limit=version - before.version)
    config = record_config(deps.profile, before)
    events = [from_recorded(r) for r in recorded]
    return [
        p for _, batch in parts_for_events(before, events, config, status_after_each=False) for p in batch
    ]


def _record_state(deps: Deps, tenant: str, thread_id: str) -> RecordState:
    state = load_state(deps.store, _record_stream(deps, tenant, thread_id), deps.states)
    if state.version == 0:
        raise not_found(thread_id)
    return state


def _within_stream(deps: Deps, tenant: str, thread_id: str, at_version: int) -> None:
    """A version past the stream's head is refused: a replay would stop at the head and answer it."""
    version = deps.store.stream_version(_record_stream(deps, tenant, thread_id))
    if version == 0:
        raise not_found(thread_id)
    if at_version > version:
        raise ApiError(
            422,
            "version_out_of_range",
            f"at_version {at_version} is past the thread's history: its current version is {version}",
            {"at_version": at_version, "version": version},
        )


def _record_stream(deps: Deps, tenant: str, thread_id: str) -> str:
    """The stream holding the thread's record: its own, or its resource's in resource scope."""
    try:
        return record_stream_for(deps, tenant, thread_id)
    except ResourceRequiredError:
        raise not_found(thread_id) from None


@router.get("", response_model=ThreadsOut, responses=_ERRORS, summary="the tenant's threads")
def list_threads(
    deps: DepsDep,
    tenant: Tenant,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> dict[str, Any]:
    rows = queries.list_threads(deps.store, tenant, limit=limit, offset=offset)
    return {"threads": [r.as_json() for r in rows]}


@router.put("/{thread_id}", response_model=Thread, responses=_ERRORS, summary="create or update a thread")
def put_thread(thread_id: ThreadId, body: ThreadIn, deps: DepsDep, tenant: Tenant) -> dict[str, Any]:
    if body.config is not None:
        check_thread_models(deps.profile, body.config)
    state = configure_thread(
        deps,
        tenant=tenant,
        thread_id=thread_id,
        resource_id=body.resource_id,
        title=body.title,
        metadata=body.metadata,
        config=body.config,
    )
    return _thread_json(state, thread_id)


@router.get("/{thread_id}", response_model=Thread, responses=_ERRORS, summary="a thread")
def get_thread(thread_id: ThreadId, deps: DepsDep, tenant: Tenant) -> dict[str, Any]:
    return _thread_json(_existing(deps, tenant, thread_id), thread_id, deps)


@router.delete("/{thread_id}", status_code=204, responses=_ERRORS, summary="erase the thread and its events")
def delete_thread(thread_id: ThreadId, deps: DepsDep, tenant: Tenant) -> Response:
    try:
        erase_thread(deps, tenant=tenant, thread_id=thread_id)
    except RecordNotFoundError:
        raise not_found(thread_id) from None
    return Response(status_code=204)


@router.post("/{thread_id}/messages", response_model=AppendOut, responses=_ERRORS, summary="append messages")
def post_messages(thread_id: ThreadId, body: MessagesIn, deps: DepsDep, tenant: Tenant) -> Response:
    outcome = append_messages(
        deps, tenant=tenant, thread_id=thread_id, messages=body.messages, resource_id=body.resource_id
    )
    state = (
        outcome.state if outcome.state is not None else load_state(deps.store, outcome.stream_id, deps.states)
    )
    config = record_config(deps.profile, state)
    parts = _emitted(deps, outcome.events, state, outcome.prior)
    status = status_part(state, config)
    return json_response(
        {
            "thread_id": thread_id,
            "version": outcome.version,
            "appended": [
                {"message_id": a.message_id, "seq": a.seq, "tokens": a.tokens} for a in outcome.appended
            ],
            "duplicates": outcome.duplicates,
            "status": status["data"],
            "parts": [*parts, status],
        }
    )


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
    model: Annotated[
        str | None, Query(max_length=200, description="the caller's model (provider change, TTL)")
    ] = None,
    format: Annotated[Literal["om", "openai"], Query(description="openai: a chat-completions list")] = "om",
    at_version: Annotated[
        int | None, Query(ge=1, le=2**53, description="time travel: as of version N")
    ] = None,
    wait: Annotated[bool, Query(description="false: never block on synchronous work")] = True,
) -> Response:
    if at_version is not None:
        _within_stream(deps, tenant, thread_id, at_version)
    read = read_context(
        deps, tenant=tenant, thread_id=thread_id, caller_model=model, at_version=at_version, wait=wait
    )
    window, stream_id = read.window, read.stream_id
    # what this read caused (activations, a synchronous cycle)
    parts = _parts_since(deps, read.found, stream_id, window.version) if read.found is not None else []
    status = {"type": "data-om-status", "id": f"om-status:{stream_id}", "data": window.status}
    common = {
        "thread_id": thread_id,
        "version": window.version,
        "status": window.status,
        "warnings": window.warnings,
        "parts": [*parts, status],
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
    state = _record_state(deps, tenant, thread_id)
    return build_status(state, record_config(deps.profile, state))


@router.get("/{thread_id}/events", response_model=EventsOut, responses=_ERRORS, summary="replay the stream")
def get_events(
    thread_id: ThreadId,
    deps: DepsDep,
    tenant: Tenant,
    after: Annotated[int, Query(ge=0, le=2**53, description="stream version to start after")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    types: Annotated[str | None, Query(max_length=2000, description="comma-separated event types")] = None,
) -> dict[str, Any]:
    stream_id = _record_stream(deps, tenant, thread_id)
    wanted: set[str] | None = None
    if types:
        wanted = {t.strip() for t in types.split(",") if t.strip()}
        unknown = sorted(wanted - set(EVENT_CLASSES))
        if unknown:
            raise ApiError(
                422,
                "unknown_event_type",
                f"unknown event type(s): {', '.join(unknown)}",
                {"unknown": unknown, "known": sorted(EVENT_CLASSES)},
            )
    if deps.store.stream_version(stream_id) == 0:
        raise not_found(thread_id)
    out: list[dict[str, Any]] = []
    cursor = after
    exhausted = False
    # a type filter may skip most events: keep reading pages until the page is full or the stream ends
    while len(out) < limit and not exhausted:
        page = deps.store.read_stream(stream_id, after_version=cursor, limit=limit)
        exhausted = len(page) < limit
        for recorded in page:
            cursor = recorded.stream_version
            if wanted is None or recorded.event_type in wanted:
                out.append(
                    {
                        "position": recorded.global_position,
                        "version": recorded.stream_version,
                        "type": recorded.event_type,
                        "schema_version": recorded.schema_version,
                        "data": recorded.data,
                        "metadata": recorded.metadata,
                        "time": recorded.recorded_at.isoformat(),
                    }
                )
                if len(out) >= limit:
                    break
    more = not exhausted or cursor < deps.store.stream_version(stream_id)
    return {"thread_id": thread_id, "events": out, "next_after": cursor if more else None}


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
    stream_id = _record_stream(deps, tenant, thread_id)
    if deps.store.stream_version(stream_id) == 0:
        raise not_found(thread_id)
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
        deps.store,
        stream_id,
        dict(deps.profile),
        last_position=position,
        is_disconnected=request.is_disconnected,
        poll_interval=request.app.state.sse_poll_interval,
        heartbeat_interval=request.app.state.sse_heartbeat_interval,
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
    state = _record_state(deps, tenant, thread_id)
    shown = state
    if generation is not None and generation != state.generation:
        if generation > state.generation:
            raise ApiError(404, "generation_not_found", f"generation {generation} does not exist yet")
        # a generation's final log is the state just before the reflection that ended it
        ended_at = state.generations[generation + 1].started_at_version
        shown = replay_state(deps.store, _record_stream(deps, tenant, thread_id), ended_at - 1)
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
    stream_id = _record_stream(deps, tenant, thread_id)
    before = _record_state(deps, tenant, thread_id)
    run = observe_now if kind == "observe" else reflect_now
    outcome = run(deps, tenant=tenant, thread_id=thread_id, wait=wait)
    state = outcome.state
    parts = _parts_since(deps, before, stream_id, state.version)
    config = record_config(deps.profile, state)
    status = status_part(state, config)
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
    page: Annotated[int, Query(ge=-1_000_000, le=1_000_000)] = 1,
    limit: Annotated[int | None, Query(ge=-1_000_000, le=1_000_000)] = None,
    detail: Literal["low", "high"] = "low",
    part_type: Annotated[str | None, Query(max_length=100)] = None,
    tool_name: Annotated[str | None, Query(max_length=200)] = None,
    part_index: Annotated[int | None, Query(ge=0, le=100_000)] = None,
    char_offset: Annotated[int, Query(ge=0, le=100_000_000)] = 0,
    before: datetime | None = None,
    after: datetime | None = None,
) -> dict[str, Any]:
    state = _existing(deps, tenant, thread_id)
    config = record_config(deps.profile, state)
    counter = counter_for(config)
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
    semantic: SemanticSearch | None = None
    if vector_index_enabled(config):

        def semantic(query: str, top_k: int) -> list[GroupHit]:
            return search_observations(
                deps, tenant=tenant, thread_id=thread_id, query=query, top_k=top_k, config=config
            )

    return recall(
        deps.store,
        tenant=tenant,
        thread_id=thread_id,
        q=q,
        count=counter.count_text,
        scope=config.scope,
        semantic=semantic,
    )


def _utc(moment: datetime | None) -> datetime | None:
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)
