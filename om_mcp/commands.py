"""The ``om mcp`` verb, registered on the ``om`` command line. The SDK is imported only when it runs, so
``om`` itself works without the ``mcp`` extra."""

from __future__ import annotations

from typing import Annotated

import typer

from om_mcp.mount import EXTRA, sdk_missing


def mcp(
    url: Annotated[
        str, typer.Option(envvar="OM_MCP_URL", help="The running om server (its base URL).")
    ] = "http://127.0.0.1:8080",
    api_key: Annotated[
        str | None, typer.Option(envvar="OM_MCP_API_KEY", help="The om API key (a tenant's).")
    ] = None,
    thread: Annotated[
        str | None,
        typer.Option(envvar="OM_MCP_THREAD_ID", help="The thread a tool call uses when it names none."),
    ] = None,
    resource: Annotated[
        str | None,
        typer.Option(
            envvar="OM_MCP_RESOURCE_ID", help="The resource a new thread belongs to when a call names none."
        ),
    ] = None,
) -> None:
    """Serve om's MCP tools on stdin/stdout, for desktop clients that speak only stdio; every call goes to
    the running server at --url."""
    try:
        from om_mcp.stdio import BridgeError, Remote, serve
    except ImportError as error:
        if not sdk_missing(error):
            raise
        typer.echo(f"error: om mcp needs the MCP SDK: pip install 'om[{EXTRA}]'", err=True)
        raise typer.Exit(2) from None
    try:
        serve(Remote(url=url, api_key=api_key, thread=thread, resource=resource))
    except BridgeError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None


def register(app: typer.Typer) -> None:
    app.command()(mcp)
