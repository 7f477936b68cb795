"""Health, readiness, metrics, the recall tool's schema, threads of a resource, and the web page."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from om_api.auth import Tenant
from om_api.deps import DepsDep, SettingsDep
from om_api.json_body import JsonBodyRoute
from om_api.routes.threads import _ERRORS, threads_json
from om_api.schemas import ID_PATTERN, ThreadsOut
from om_api.ui import PAGE
from om_core.application.recall import tool_schema
from om_core.application.threads import threads_of

router = APIRouter(route_class=JsonBodyRoute)


@router.get("/healthz", tags=["system"], summary="liveness")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", tags=["system"], summary="readiness: database and broker")
def readyz(deps: DepsDep, settings: SettingsDep) -> JSONResponse:
    checks: dict[str, str] = {}
    ready = True
    try:
        deps.store.stream_version("__readyz__/thread/probe")
        checks["database"] = "ok"
    except Exception as error:  # any failure means not ready; the reason is reported, not raised
        checks["database"] = f"error: {type(error).__name__}"
        ready = False
    if getattr(deps.dispatcher, "runs_inline", False) or type(deps.dispatcher).__name__ == "InlineDispatcher":
        checks["broker"] = "inline executor"
    elif settings.broker_url.startswith(("redis://", "rediss://")):
        try:
            import redis

            redis.Redis.from_url(settings.broker_url, socket_timeout=0.5, socket_connect_timeout=0.5).ping()
            checks["broker"] = "ok"
        except Exception as error:  # same: report, don't raise
            checks["broker"] = f"error: {type(error).__name__}"
            ready = False
    else:
        checks["broker"] = "in-memory"
    return JSONResponse(
        {"status": "ready" if ready else "not_ready", "checks": checks}, status_code=200 if ready else 503
    )


@router.get("/metrics", tags=["system"], summary="Prometheus metrics", response_class=Response)
def metrics(request: Request) -> Response:
    # the HTTP layer's own metrics, then the engine's (appends, model calls, outbox) from the shared registry
    engine: bytes = request.app.state.render_engine_metrics()
    body = generate_latest(request.app.state.metrics.registry) + engine
    return Response(body, media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/tools/recall", tags=["tools"], summary="the recall tool's JSON schema", responses=_ERRORS)
def recall_tool(tenant: Tenant) -> dict[str, Any]:
    del tenant  # authenticated like every /v1 call, though the schema is the same for all
    return tool_schema()


@router.get(
    "/v1/resources/{resource_id}/threads",
    tags=["threads"],
    response_model=ThreadsOut,
    responses=_ERRORS,
    summary="threads of a resource",
)
def resource_threads(
    resource_id: Annotated[str, Path(min_length=1, max_length=256, pattern=ID_PATTERN)],
    deps: DepsDep,
    tenant: Tenant,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> dict[str, Any]:
    return threads_json(threads_of(deps, tenant=tenant, resource_id=resource_id, limit=limit, offset=offset))


@router.get("/ui", tags=["ui"], summary="the web page", response_class=HTMLResponse, include_in_schema=False)
def ui() -> HTMLResponse:
    return HTMLResponse(PAGE)
