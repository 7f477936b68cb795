"""``om mcp``: the MCP server of a running om, for clients that speak only stdio (desktop apps).

It holds no database and no tool of its own: every message the client writes on stdin is posted to the
server's ``/mcp`` endpoint with the SDK's streamable HTTP client transport, and every answer is written back
on stdout, so the tools, their schemas, the tenant's isolation and every refusal are the server's. The key,
and the thread and resource a call uses when it names none, go with each request as headers.

Before it serves, it asks the server once whether it answers and accepts the key (``GET
/v1/tools/recall``, which every key may read), so a wrong URL or key is one line on stderr, not a client
that hangs or a tool that fails later.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Awaitable
from dataclasses import dataclass
from typing import Protocol

import anyio
import httpx
import httpx2
from mcp.client.streamable_http import streamable_http_client
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from om_mcp.mount import MCP_PATH
from om_mcp.tools import RESOURCE_HEADER, THREAD_HEADER

log = logging.getLogger("om_mcp.stdio")

# the SDK's own client timeouts: 30 s to connect or send, 300 s for an answer (a read may wait for an
# observation to finish)
_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


class BridgeError(Exception):
    """The server cannot be used as given (unreachable, a refused key): one line for the operator."""


@dataclass(frozen=True)
class Remote:
    url: str
    api_key: str | None = None
    thread: str | None = None
    resource: str | None = None

    @property
    def endpoint(self) -> str:
        return self.url.rstrip("/") + MCP_PATH

    def headers(self) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        if self.thread:
            headers[THREAD_HEADER] = self.thread
        if self.resource:
            headers[RESOURCE_HEADER] = self.resource
        return headers


def check(remote: Remote) -> None:
    """Raise BridgeError unless the server answers and accepts the key."""
    try:
        response = httpx.get(
            remote.url.rstrip("/") + "/v1/tools/recall", headers=remote.headers(), timeout=10
        )
    except httpx.HTTPError as error:
        raise BridgeError(
            f"cannot reach om at {remote.url} ({error}); start it (om serve) or pass --url"
        ) from None
    if response.status_code == 401:
        raise BridgeError(f"om at {remote.url} refused the key (401): pass --api-key or set OM_MCP_API_KEY")
    if not response.is_success:
        raise BridgeError(f"om at {remote.url} answered {response.status_code}: {response.text[:200]}")


class _Sink(Protocol):
    def send(self, message: SessionMessage, /) -> Awaitable[None]: ...


async def _pump(source: AsyncIterable[SessionMessage | Exception], sink: _Sink) -> None:
    async for message in source:
        if isinstance(message, Exception):
            log.warning("dropped a message that could not be read: %s", message)
            continue
        await sink.send(message)


async def bridge(remote: Remote) -> None:
    """Serve stdin/stdout until the client closes stdin."""
    async with (
        httpx2.AsyncClient(headers=remote.headers(), timeout=_TIMEOUT) as http,
        streamable_http_client(remote.endpoint, http_client=http) as (remote_read, remote_write),
        stdio_server() as (local_read, local_write),
        anyio.create_task_group() as group,
    ):
        group.start_soon(_pump, remote_read, local_write)
        await _pump(local_read, remote_write)
        group.cancel_scope.cancel()


def serve(remote: Remote) -> None:
    check(remote)
    logging.basicConfig(level=logging.WARNING, format="om mcp: %(levelname)s %(message)s")
    anyio.run(bridge, remote)
