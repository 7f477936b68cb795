"""CLI verbs of the work path: ``om worker``, ``om beat``, ``om flower``.

Each is a thin front of the Celery program for ``om_workers.app``; configuration comes from the ``OM_*``
environment like every other process.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from om_workers.names import ALL_QUEUES

if TYPE_CHECKING:
    from celery import Celery

    from om_core.settings import ServerSettings

DEFAULT_QUEUES = ",".join(ALL_QUEUES)


def _loopback(address: str) -> bool:
    return address in ("127.0.0.1", "::1", "localhost")


def _celery_app(settings: ServerSettings | None = None) -> Celery:
    from om_core.settings import ServerSettings
    from om_workers.app import create_app

    # an invalid OM_* setting is reported by the om command itself, as for every verb
    settings = settings or ServerSettings()
    try:
        return create_app(settings)
    except ValueError as error:  # an invalid OM_WORKER_* setting
        typer.echo(f"configuration error: {error}", err=True)
        raise typer.Exit(2) from None


def register(app: typer.Typer) -> None:
    """Add the worker verbs to the ``om`` command line."""

    @app.command()
    def worker(
        queues: Annotated[
            str, typer.Option("--queues", "-Q", help="Comma-separated queues, most urgent first.")
        ] = DEFAULT_QUEUES,
        concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1, help="Worker processes.")] = 2,
        pool: Annotated[str, typer.Option(help="prefork, threads or solo.")] = "prefork",
        loglevel: Annotated[str, typer.Option(help="Celery log level.")] = "INFO",
        hostname: Annotated[str | None, typer.Option(help="Node name (default: om@<host>).")] = None,
        metrics_port: Annotated[
            int | None, typer.Option(envvar="OM_WORKER_METRICS_PORT", help="Serve Prometheus metrics here.")
        ] = None,
    ) -> None:
        """Run a Celery worker for om's queues (om.sync first: blocking work is never behind background)."""
        from om_core.bootstrap import check_profile_models, check_webhook_secrets, wait_for_schema
        from om_core.settings import ServerSettings

        settings = ServerSettings()
        # as om serve does: a model without its key would fail every task this worker takes
        check_profile_models(settings.profile_document)
        # the worker signs webhook deliveries: a secret it cannot read would fail every one of them
        check_webhook_secrets(settings.profile_document)
        # a worker on an older schema would fail every task that writes what the newer one has
        wait_for_schema(
            settings.database_url, settings.schema_wait_seconds, lambda line: typer.echo(line, err=True)
        )
        celery_app = _celery_app(settings)
        if metrics_port:
            from om_workers.metrics import start_metrics_server

            start_metrics_server(metrics_port)
        argv = ["worker", "-Q", queues, "-c", str(concurrency), "-P", pool, "-l", loglevel, "-E"]
        if hostname:
            argv += ["-n", hostname]
        celery_app.worker_main(argv)

    @app.command()
    def beat(
        schedule: Annotated[Path, typer.Option(help="Where beat keeps its last-run times.")] = Path(
            ".om/celerybeat-schedule"
        ),
        loglevel: Annotated[str, typer.Option(help="Celery log level.")] = "INFO",
    ) -> None:
        """Run the one beat: outbox re-publish, idle-TTL sweep and stuck-cycle recovery on a schedule."""
        celery_app = _celery_app()
        schedule.parent.mkdir(parents=True, exist_ok=True)
        celery_app.start(["beat", "--schedule", str(schedule), "-l", loglevel])

    @app.command()
    def flower(
        port: Annotated[int, typer.Option(min=1, max=65_535)] = 5555,
        address: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
        no_auth: Annotated[
            bool, typer.Option("--no-auth", help="Run without basic auth (loopback addresses only).")
        ] = False,
    ) -> None:
        """Run Flower (the Celery monitor) behind basic auth from OM_FLOWER_USER / OM_FLOWER_PASSWORD."""
        from om_core.settings import ServerSettings

        settings = ServerSettings()
        argv = ["flower", f"--port={port}", f"--address={address}"]
        if settings.flower_user and settings.flower_password is not None:
            # through Flower's environment, not argv: a command line is readable by every local user (ps)
            os.environ["FLOWER_BASIC_AUTH"] = (
                f"{settings.flower_user}:{settings.flower_password.get_secret_value()}"
            )
        elif not no_auth:
            typer.echo("refusing to start Flower without OM_FLOWER_USER and OM_FLOWER_PASSWORD", err=True)
            raise typer.Exit(2)
        elif not _loopback(address):
            typer.echo(f"--no-auth is only allowed on a loopback address, not {address}", err=True)
            raise typer.Exit(2)
        _celery_app(settings).start(argv)
