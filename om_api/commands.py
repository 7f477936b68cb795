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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from om_core.settings import ServerSettings

keys_app = typer.Typer(help="Manage API keys (stored hashed).", no_args_is_help=True)
bench_app = typer.Typer(help="Run a benchmark from bench/ (prints JSON).", no_args_is_help=True)

# name: (module, summary); each benchmark parses its own options, so `om bench NAME --help` is its help
BENCHES = {
    "api": ("bench.api_bench", "Clients back to back on the deployed processes: turns/s, CPU per turn."),
    "store": ("bench.store_bench", "The event store: append throughput and read latency."),
    "workers": ("bench.workers_bench", "Celery workers: trigger latency, throughput, reads that wait."),
    "read": ("bench.read_bench", "Context read latency beside a writer, by stream length (100 to 100k)."),
    "turn": ("bench.turn_bench", "An agent's turn, 200 ms apart, OM active: three calls, one, in-process."),
    "instructions": ("bench.instructions_bench", "Instructions per in-process turn, counted by callgrind."),
    "real-model": ("bench.real_model_bench", "A real small model as Observer and Reflector: robustness."),
    "quality": (
        "bench.quality_bench",
        "What the local Observer keeps of generated conversations with facts.",
    ),
    "soak": (
        "bench.soak",
        "om serve, two om workers and beat under conversations and faults; integrity violations by kind.",
    ),
}


def _settings(**overrides: object) -> ServerSettings:
    from om_core.settings import ServerSettings

    return ServerSettings(**{k: v for k, v in overrides.items() if v is not None})


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
    from om_core.adapters.models.model_ids import KEYLESS_MODEL
    from om_core.bootstrap import check_profile_models, wait_for_schema
    from om_core.settings import EMBEDDED_BROKER_URL
    from om_core.startup import (
        auth_summary,
        check_broker,
        check_port_free,
        refuse_sqlite_with_broker,
        startup_line,
    )

    settings = _settings(host=host, port=port, database_url=database_url)
    if embedded:
        # SQLite and an in-process Celery worker on the in-memory transport: the same tasks, no services,
        # and without a profile the model that needs no key
        settings = settings.model_copy(update={"broker_url": EMBEDDED_BROKER_URL})
        settings = settings.with_default_profile({"model": KEYLESS_MODEL})
    else:
        refuse_sqlite_with_broker(settings, "serve")
    # found before anything that takes seconds (the embedded worker, a migration)
    check_port_free(
        settings.host,
        settings.port,
        "om serve",
        "choose another with --port (OM_PORT), or stop what listens there",
    )
    # what every process would find at its first request, found before listening
    check_profile_models(settings.profile_document)
    wait_for_schema(
        settings.database_url, settings.schema_wait_seconds, lambda line: typer.echo(line, err=True)
    )
    if settings.uses_broker:
        check_broker(settings.broker_url)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    listening = f"http://{settings.host}:{settings.port}" + (f" ({workers} processes)" if workers > 1 else "")
    typer.echo(startup_line("serve", settings, auth_summary(settings), listening), err=True)
    if embedded or workers == 1:
        uvicorn.run(
            create_app(settings),
            host=settings.host,
            port=settings.port,
            log_level="info",
            access_log=settings.access_log,
        )
        return
    # uvicorn starts each worker process afresh: each builds its own app from the OM_* environment, so the
    # options given here are passed on through it
    if database_url is not None:
        os.environ["OM_DATABASE_URL"] = settings.database_url
    uvicorn.run(
        "om_api.app:app_from_environment",
        factory=True,
        host=settings.host,
        port=settings.port,
        log_level="info",
        access_log=settings.access_log,
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
    from om_core.adapters.store import create_event_store
    from om_core.bootstrap import prepare_database

    if not valid_tenant(tenant):
        typer.echo(f"invalid tenant {tenant!r}: letters, digits, . _ - (up to 64)", err=True)
        raise typer.Exit(2)
    url = _settings(database_url=database_url).database_url
    prepare_database(url)
    store = create_event_store(url)
    try:
        key = create_key(store, tenant, label)
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
    from om_core.adapters.store import create_event_store
    from om_core.application.simulate import simulate_thread
    from om_core.bootstrap import build_inline, prepare_database
    from om_core.settings import read_profile

    settings = _settings(database_url=database_url)
    overrides = read_profile(config)
    prepare_database(settings.database_url)
    source = create_event_store(settings.database_url)
    # the thread's own profile (a deployment's named one or the tenant's) is what it is re-run on
    profile = thread_profile_layer(settings, tenant, thread)
    with tempfile.TemporaryDirectory(prefix="om-simulate-") as scratch_dir:
        scratch, dispatcher = build_inline(
            database_url=f"sqlite:///{scratch_dir}/scratch.sqlite3", profile=profile, migrate=True
        )
        scratch.sync_wait_seconds = 0.0
        try:
            report = simulate_thread(
                source,
                source,
                scratch,
                tenant=tenant,
                thread_id=thread,
                config=overrides,
                source_profile=profile,
                drain=dispatcher.drain,
            )
        finally:
            dispatcher.close()
            source.close()
    typer.echo(json.dumps(report.as_dict(), indent=2, ensure_ascii=False))


def thread_profile_layer(settings: ServerSettings, tenant: str, thread: str) -> dict[str, Any]:
    """The options of the profile ``thread`` runs under, read from the deployment's file and the store."""
    from om_core.application.profiles import profile_layer
    from om_core.application.streams import thread_own_state
    from om_core.bootstrap import reading_deps

    deps = reading_deps(settings.database_url, settings.profile_document)
    try:
        return dict(profile_layer(deps, tenant, thread_own_state(deps, tenant, thread).profile))
    finally:
        deps.close()


def _checkout() -> Path | None:
    """The checkout this om runs from (an editable install), where bench/ lives; None for an installed
    package, which carries no benchmarks."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "bench" / "turn_bench.py").is_file() else None


def _bench(module: str) -> Callable[[typer.Context], None]:
    def run(ctx: typer.Context) -> None:
        root = _checkout()
        assert root is not None  # registered only in a checkout
        path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path}
        raise typer.Exit(subprocess.call([sys.executable, "-m", module, *ctx.args], env=env))

    return run


for _name, (_module, _summary) in BENCHES.items():
    bench_app.command(
        _name,
        help=f"{_summary} Options: om bench {_name} --help.",
        # every option, --help included, is the benchmark's own
        add_help_option=False,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(_bench(_module))


def no_benchmarks(ctx: typer.Context) -> None:
    """The benchmarks of a checkout of om (not in the installed package)."""
    del ctx
    typer.echo(
        "error: om bench runs the benchmarks in bench/ of a checkout of om, which the installed package "
        "does not carry: clone the repository and run `om bench ...` (or ./scripts/...) from it",
        err=True,
    )
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command()(serve)
    app.command()(simulate)
    if _checkout() is not None:
        app.add_typer(bench_app, name="bench")
    else:
        # not listed by `om --help`, and one line when called all the same
        app.command(
            "bench",
            hidden=True,
            add_help_option=False,
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        )(no_benchmarks)
    app.add_typer(keys_app, name="keys")
