"""The FastAPI application: ``create_app(settings, deps=None)``.

``deps`` lets the caller choose how work runs (the inline executor in tests); without it the API's
composition root (``om_api/bootstrap.py``) builds them from ``settings``: a Celery dispatcher, or with a
``memory://`` broker an in-process Celery worker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline
from prometheus_client import CollectorRegistry, Counter, Histogram

from om_api import errors
from om_api.auth import KeyRing
from om_api.bootstrap import build_api_deps, build_chat_proxy, render_engine_metrics
from om_api.errors import ApiError, error_body
from om_api.rate_limit import TenantRateLimiter
from om_api.routes import chat, profiles, system, threads
from om_core.application.deps import Deps
from om_core.bootstrap import check_profile_keys, check_thread_models
from om_core.settings import ServerSettings
from om_mcp.mount import mount_mcp

log = logging.getLogger("om_api")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyTooLarge(ApiError):
    def __init__(self, limit: int) -> None:
        super().__init__(
            413, "payload_too_large", f"the request body exceeds {limit} bytes", {"limit": limit}
        )


class RequestLimits:
    """Refuse bodies over ``max_bytes``: at once from Content-Length, else while the body streams in."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes or declared < 0:
                    await _send_error(send, 413 if declared >= 0 else 400, self.max_bytes)
                    return
        received = 0
        limit = self.max_bytes

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, counted, send)


async def _send_error(send: Send, status: int, limit: int) -> None:
    import json

    if status == 413:
        body = error_body("payload_too_large", f"the request body exceeds {limit} bytes", {"limit": limit})
    else:
        body = error_body("bad_request", "invalid Content-Length header")
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "om_http_requests", "HTTP requests", ["method", "route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "om_http_request_seconds",
            "HTTP request latency",
            ["method", "route"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
            registry=self.registry,
        )


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            route = scope.get("route")
            name = getattr(route, "path", "unmatched")
            method = scope.get("method", "")
            self.metrics.requests.labels(method, name, str(status)).inc()
            if not name.endswith("/stream"):
                self.metrics.latency.labels(method, name).observe(time.perf_counter() - started)


def app_from_environment() -> FastAPI:
    """The app of one ``om serve --workers N`` process, configured by the OM_* environment."""
    return create_app(ServerSettings())


def create_app(
    settings: ServerSettings,
    deps: Deps | None = None,
    *,
    sse_poll_interval: float = 0.15,
    sse_heartbeat_interval: float = 15.0,
) -> FastAPI:
    owned: list[Callable[[], None]] = []
    if deps is None:
        deps, owned = build_api_deps(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if not settings.auth_enabled:
            log.warning(
                "AUTH IS DISABLED (OM_AUTH=disabled): every request acts as tenant 'default'. "
                "Allowed only because the server binds to the loopback host %s.",
                settings.host,
            )
        async with mcp_serving():
            yield
        for stop in owned:
            stop()

    # /docs and /redoc from the assets fastapi-offline ships, not a CDN: they work where nothing is reachable
    app = FastAPIOffline(
        title="om — Observational Memory",
        version="1.0.0",
        summary="Append messages, get the projected context window, stream Mastra data-om-* parts.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.deps = deps
    app.state.keyring = KeyRing(settings.api_keys, deps.keys)
    app.state.rate_limiter = (
        TenantRateLimiter(settings.rate_limit, settings.rate_limit_burst) if settings.rate_limit > 0 else None
    )
    app.state.metrics = Metrics()
    # handed to the routes, which import only the application and the API package
    app.state.check_models = check_thread_models
    app.state.check_profile_keys = check_profile_keys
    app.state.render_engine_metrics = render_engine_metrics
    app.state.chat_proxy = build_chat_proxy(settings, deps.profile, *deps.profiles.values())
    app.state.sse_poll_interval = sse_poll_interval
    app.state.sse_heartbeat_interval = sse_heartbeat_interval
    # first: the middleware answering unexpected errors must be the innermost one
    errors.install(app)
    app.include_router(threads.router)
    app.include_router(system.router)
    app.include_router(chat.router)
    app.include_router(profiles.router)
    # the MCP endpoint (om_mcp), or an answer saying how to install it
    mcp_serving = mount_mcp(app)
    app.add_middleware(RequestLimits, max_bytes=settings.max_request_bytes)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    return app
