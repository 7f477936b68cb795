"""The ``om`` command line. Thin: every verb parses its arguments and calls a use case or a server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from om_core.settings import ServerSettings

app = typer.Typer(help="Observational Memory as an event-sourced service.", no_args_is_help=True)
projections_app = typer.Typer(help="Inspect and rebuild projections.", no_args_is_help=True)
app.add_typer(projections_app, name="projections")


def _settings() -> ServerSettings:
    from om_core.settings import ServerSettings, SettingsError

    try:
        return ServerSettings()
    except SettingsError as error:
        typer.echo(f"configuration error: {error}", err=True)
        raise typer.Exit(2) from None


@app.command()
def demo(
    turns: Annotated[int, typer.Option(min=1, help="Conversation turns (user + assistant).")] = 320,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic conversation.")] = 7,
    as_json: Annotated[bool, typer.Option("--json", help="Print only the summary, as JSON.")] = False,
    database: Annotated[
        Path | None, typer.Option(help="SQLite file to write (default: a new one in .om/).")
    ] = None,
    background: Annotated[
        bool, typer.Option(help="Run background work on a worker thread instead of right after each commit.")
    ] = False,
) -> None:
    """Run a long synthetic conversation through the engine, embedded: SQLite and the local model."""
    from om_api.demo.runner import run_demo

    run_demo(turns=turns, seed=seed, as_json=as_json, database=database, background=background)


@app.command()
def migrate(
    database_url: Annotated[
        str | None, typer.Option(envvar="OM_DATABASE_URL", help="Database to migrate.")
    ] = None,
) -> None:
    """Upgrade the database schema to the newest revision (Alembic owns the schema)."""
    from om_core.adapters.store.migrations import upgrade_to_head

    url = database_url or _settings().database_url
    upgrade_to_head(url)
    typer.echo(f"schema at head on {url.split('@')[-1]}")


@projections_app.command("rebuild")
def projections_rebuild(
    verify: Annotated[bool, typer.Option(help="Only compare: fail if a rebuilt projection differs.")] = False,
    database_url: Annotated[str | None, typer.Option(envvar="OM_DATABASE_URL")] = None,
    prefix: Annotated[str, typer.Option(help="Only streams whose id starts with this.")] = "",
) -> None:
    """Rebuild every stream's projection from its events; with --verify, prove the stored one is identical."""
    from om_core.adapters.store.sql_store import create_event_store
    from om_core.application.projections import rebuild_projections

    store = create_event_store(database_url or _settings().database_url)
    report = rebuild_projections(store, verify_only=verify, prefix=prefix)
    typer.echo(json.dumps(report.as_dict(), indent=2))
    if verify and report.mismatched:
        raise typer.Exit(1)


@projections_app.command("reindex")
def projections_reindex(
    database_url: Annotated[str | None, typer.Option(envvar="OM_DATABASE_URL")] = None,
    prefix: Annotated[str, typer.Option(help="Only streams whose id starts with this.")] = "",
) -> None:
    """Embed every recorded observation's groups again into the vector index (retrieval vector: true),
    with the profile's embedder: after enabling vectors on existing records or changing the embedder."""
    from dataclasses import asdict

    from om_core.application.vector_index import reindex_observations
    from om_core.bootstrap import build_inline
    from om_core.settings import read_profile

    settings = _settings()
    profile = read_profile(settings.profile) if settings.profile else {}
    deps, dispatcher = build_inline(
        database_url=database_url or settings.database_url, profile=profile, migrate=False
    )
    try:
        report = reindex_observations(deps, prefix=prefix)
    finally:
        dispatcher.close()
    typer.echo(json.dumps(asdict(report), indent=2))


@app.command()
def replay(
    thread: Annotated[str, typer.Argument(help="Thread id (or a full stream id tenant/thread/ID).")],
    to: Annotated[int | None, typer.Option("--to", min=1, help="Replay the first N events only.")] = None,
    tenant: Annotated[str, typer.Option(envvar="OM_TENANT")] = "default",
    database_url: Annotated[str | None, typer.Option(envvar="OM_DATABASE_URL")] = None,
) -> None:
    """Print the context window a fresh fold of the thread's events gives (at version N with --to)."""
    from om_core.adapters.store.sql_store import create_event_store
    from om_core.application.projections import replay_context

    settings = _settings()
    store = create_event_store(database_url or settings.database_url)
    stream_id = thread if thread.count("/") >= 2 else f"{tenant}/thread/{thread}"
    window = replay_context(store, stream_id, to_version=to, profile=settings.profile_layer)
    typer.echo(json.dumps(window, indent=2, ensure_ascii=False))


def _register_entry_points() -> None:
    # the server and worker verbs live with their entry points; they import this module's app lazily
    from om_api.commands import register as register_api_commands
    from om_workers.commands import register as register_worker_commands

    register_worker_commands(app)
    register_api_commands(app)


_register_entry_points()


if __name__ == "__main__":
    app()
