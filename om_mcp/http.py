"""The MCP endpoint of the API process: streamable HTTP, stateless, behind the service's own key check.

Each request is authenticated by ``current_tenant`` (om_api/auth.py), the check every route runs: the
bearer key's tenant (``default`` when auth is disabled on loopback), within the tenant's rate limit. A
refused request gets the API's error answer (401 with ``WWW-Authenticate: Bearer``, 429 with
``Retry-After``) before the SDK sees it; an accepted one carries its tenant in the request's state to the
handlers (``om_mcp/server.py``).

Stateless (no MCP session kept between requests, answers as JSON), so any API process or replica answers
any request, as with the HTTP routes. With auth disabled, the SDK's DNS-rebinding protection admits only
loopback Host and Origin headers, since then no key stands between a browser page and the endpoint.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from om_api.auth import current_tenant
from om_api.errors import ApiError, error_response
from om_core.settings import ServerSettings
from om_mcp.server import build_server

_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


def _om_version() -> str:
    try:
        return version("om")
    except PackageNotFoundError:
        return "0"


def _transport_security(settings: ServerSettings) -> TransportSecuritySettings:
    if settings.auth_enabled:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{host}:*" for host in _LOOPBACK] + list(_LOOPBACK),
        allowed_origins=[f"http://{host}:*" for host in _LOOPBACK],
    )


class McpEndpoint:
    """The ASGI app served at ``/mcp``; ``running()`` belongs in the API's lifespan."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.server = build_server(_om_version())
        self.manager: StreamableHTTPSessionManager | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve while inside; a manager runs once, so each lifespan of the app starts its own."""
        manager = StreamableHTTPSessionManager(
            app=self.server,
            json_response=True,
            stateless=True,
            security_settings=_transport_security(self.settings),
            max_request_body_size=self.settings.max_request_bytes,
        )
        async with manager.run():
            self.manager = manager
            try:
                yield
            finally:
                self.manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            tenant = await current_tenant(Request(scope, receive))
        except ApiError as error:
            response = error_response(error.status, error.code, error.message, error.details, error.headers)
            await response(scope, receive, send)
            return
        if self.manager is None:
            raise RuntimeError("the MCP endpoint serves only while the app's lifespan runs")
        scope = {**scope, "state": {**scope.get("state", {}), "om_tenant": tenant}}
        await self.manager.handle_request(scope, receive, send)
