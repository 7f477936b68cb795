"""CLI verbs of the API package: ``om serve``, ``om keys create``, ``om simulate``, ``om bench``.

Registered on the main ``om`` app by ``register(app)`` (called at the end of ``om_api/cli.py``). Heavy
imports stay inside the verbs so ``om --help`` stays fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from om_core.settings import ServerSettings

keys_app = typer.Typer(help="Manage API keys (stored hashed).", no_args_is_help=True)

BENCHES = {"api": "bench.api_bench", "store": "bench.store_bench", "workers": "bench.workers_bench"}


def _settings(**overrides: object) -> ServerSettings:
    from om_core.settings import ServerSettings, SettingsError

    try:
        return ServerSettings(**{k: v for k, v in overrides.items() if v is not None})
    except SettingsError as error:
        typer.echo(f"configuration error: {error}", err=True)
        raise typer.Exit(2) from None


def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (OM_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (OM_PORT).")] = None,
    embedded: Annotated[
        bool,
        typer.Option(
            "--embedded",
            help="An in-process Celery worker, and SQLite unless OM_DATABASE_URL says otherwise.",
        ),
    ] = False,
    database_url: Annotated[str | None, typer.Option(help="OM_DATABASE_URL")] = None,
    workers: Annotated[int, typer.Option(min=1, help="uvicorn worker processes (not with --embedded).")] = 1,
) -> None:
    """Run the HTTP API (uvicorn)."""
    import logging

    import uvicorn

    from om_api.app import create_app

    settings = _settings(host=host, port=port, database_url=database_url)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not settings.auth_enabled:
        typer.echo(
            f"WARNING: auth is disabled (OM_AUTH=disabled); serving only on loopback {settings.host}",
            err=True,
        )
    elif not settings.api_keys:
        typer.echo("note: no OM_API_KEYS set; only keys made with `om keys create` are accepted", err=True)
    if embedded:
        # SQLite and an in-process Celery worker on the in-memory transport: the same tasks, no services
        settings = settings.model_copy(update={"broker_url": "memory://"})
        uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")
        return
    if workers == 1:
        uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")
        return
    # uvicorn starts each worker process afresh: each builds its own app from the OM_* environment, so the
    # options given here are passed on through it
    if database_url is not None:
        os.environ["OM_DATABASE_URL"] = database_url
    uvicorn.run(
        "om_api.app:app_from_environment",
        factory=True,
        host=settings.host,
        port=settings.port,
        log_level="info",
        workers=workers,
    )


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option(help="The tenant the key acts for.")],
    label: Annotated[str | None, typer.Option(help="A note to recognise the key by.")] = None,
    database_url: Annotated[str | None, typer.Option(envvar="OM_DATABASE_URL")] = None,
) -> None:
    """Create an API key for TENANT; the key is printed once and stored only as a hash."""
    from om_api.auth import create_key, valid_tenant
    from om_core.adapters.store.sql_store import create_event_store

    if not valid_tenant(tenant):
        typer.echo(f"invalid tenant {tenant!r}: letters, digits, . _ - (up to 64)", err=True)
        raise typer.Exit(2)
    store = create_event_store(database_url or _settings().database_url)
    try:
        key = create_key(store.engine, tenant, label)
    finally:
        store.close()
    typer.echo(key)


def simulate(
    thread: Annotated[str, typer.Argument(help="Thread id to re-run.")],
    config: Annotated[
        Path, typer.Option("--config", exists=True, dir_okay=False, help="YAML/JSON memory options.")
    ],
    tenant: Annotated[str, typer.Option(envvar="OM_TENANT")] = "default",
    database_url: Annotated[str | None, typer.Option(envvar="OM_DATABASE_URL")] = None,
) -> None:
    """Re-run memory over a recorded thread with another configuration, in a scratch store, and compare."""
    from om_core.adapters.store.sql_store import create_event_store
    from om_core.application.records import RecordNotFoundError
    from om_core.application.simulate import simulate_thread
    from om_core.bootstrap import build_inline
    from om_core.settings import ProfileError, read_profile

    settings = _settings()
    try:
        overrides = read_profile(config)
    except ProfileError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(2) from None
    profile = read_profile(settings.profile) if settings.profile else {}
    source = create_event_store(database_url or settings.database_url)
    with tempfile.TemporaryDirectory(prefix="om-simulate-") as scratch_dir:
        scratch, dispatcher = build_inline(
            database_url=f"sqlite:///{scratch_dir}/scratch.sqlite3", profile=profile, migrate=True
        )
        scratch.sync_wait_seconds = 0.0
        try:
            report = simulate_thread(
                source,
                scratch,
                tenant=tenant,
                thread_id=thread,
                config=overrides,
                source_profile=profile,
                drain=dispatcher.drain,
            )
        except RecordNotFoundError:
            typer.echo(f"no thread {thread!r} for tenant {tenant!r}", err=True)
            raise typer.Exit(1) from None
        finally:
            dispatcher.close()
            source.close()
    typer.echo(json.dumps(report.as_dict(), indent=2, ensure_ascii=False))


def bench(
    name: Annotated[str, typer.Argument(help=f"One of: {', '.join(BENCHES)}.")],
    args: Annotated[list[str] | None, typer.Argument(help="Arguments passed to the benchmark.")] = None,
) -> None:
    """Run a benchmark from bench/ (prints JSON)."""
    module = BENCHES.get(name)
    if module is None:
        typer.echo(f"unknown benchmark {name!r}; choose from {', '.join(BENCHES)}", err=True)
        raise typer.Exit(2)
    raise typer.Exit(subprocess.call([sys.executable, "-m", module, *(args or [])]))


def register(app: typer.Typer) -> None:
    app.command()(serve)
    app.command()(simulate)
    app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(bench)
    app.add_typer(keys_app, name="keys")
