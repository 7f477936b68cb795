"""Puts the MCP endpoint at ``/mcp`` in the API app, or, when the ``mcp`` extra is not installed, an answer
there saying how to install it. Imports nothing of the SDK itself, so the API runs without it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext

from fastapi import FastAPI
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from om_api.errors import error_response

MCP_PATH = "/mcp"
EXTRA = "mcp"
NOT_INSTALLED = (
    f"this server has no MCP endpoint: the Model Context Protocol SDK is not installed; "
    f"install om with its extra (pip install 'om[{EXTRA}]') and restart"
)


def sdk_missing(error: ImportError) -> bool:
    """The import failed because the SDK (or a package of it) is absent, not because of a bug of ours."""
    return (error.name or "").split(".")[0] in {"mcp", "mcp_types", "httpx2", "sse_starlette"}


class NotInstalled:
    """An ASGI app (a class, so Starlette routes every method to it) answering 501 with how to install."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(501, "mcp_not_installed", NOT_INSTALLED, {"extra": EXTRA})
        await response(scope, receive, send)


def mount_mcp(app: FastAPI) -> Callable[[], AbstractAsyncContextManager[None]]:
    """Route ``/mcp``; what it returns makes the context the app's lifespan enters for the endpoint to
    serve (once per lifespan)."""
    try:
        from om_mcp.http import McpEndpoint
    except ImportError as error:
        if not sdk_missing(error):
            raise
        app.router.routes.append(Route(MCP_PATH, NotInstalled(), include_in_schema=False))
        return nullcontext
    endpoint = McpEndpoint(app.state.settings)
    app.router.routes.append(Route(MCP_PATH, endpoint, include_in_schema=False))
    return endpoint.running
