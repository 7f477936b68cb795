"""CLI verbs of the work path: ``om worker``, ``om beat``, ``om flower``.

Each is a thin front of the Celery program for ``om_workers.app``; configuration comes from the ``OM_*``
environment like every other process. Each checks at start what would stop it working (the start-up checks
of ``om_core.startup``), then says in one line what it runs on.
"""

from __future__ import annotations

import atexit
import os
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from om_workers.names import ALL_QUEUES

if TYPE_CHECKING:
    from celery import Celery

    from om_core.settings import ServerSettings
    from om_workers.settings import WorkerSettings

DEFAULT_QUEUES = ",".join(ALL_QUEUES)
# the user name of a Flower started with --generate-password and no OM_FLOWER_USER
FLOWER_USER = "admin"


def _loopback(address: str) -> bool:
    return address in ("127.0.0.1", "::1", "localhost")


def _worker_settings() -> WorkerSettings:
    from pydantic import ValidationError

    from om_core.startup import StartupError
    from om_workers.settings import WorkerSettings

    try:
        return WorkerSettings()
    except ValidationError as error:
        problems = [
            f"OM_WORKER_{str(e['loc'][0]).upper()}: {e['msg']}" if e["loc"] else str(e["msg"])
            for e in error.errors()
        ]
        message = "; ".join(problems).replace("Value error, ", "")
        raise StartupError(f"invalid settings: {message}") from None


def _celery_app(settings: ServerSettings, worker: WorkerSettings) -> Celery:
    from om_workers.app import create_app

    return create_app(settings, worker)


def _needs_broker(settings: ServerSettings, process: str) -> None:
    """A work-path process on the in-memory transport would talk to a queue no other process sees."""
    from om_core.startup import StartupError, check_broker

    if not settings.uses_broker:
        raise StartupError(
            f"om {process} needs the broker the API publishes to, and OM_BROKER_URL is "
            f"{settings.broker_url} (a queue inside one process): set OM_BROKER_URL=redis://HOST:6379/0, "
            "the same for every process (`om serve --embedded` runs a worker in the server instead)"
        )
    check_broker(settings.broker_url, unreachable_ok=True)


def _metrics_directory(worker: WorkerSettings) -> Path:
    """Arrange the multiprocess directory before prometheus_client is imported (it picks its mode then)."""
    from om_core.startup import prepare_metrics_directory, remove_directory_of

    if "prometheus_client" in sys.modules:
        raise RuntimeError("prometheus_client was imported before the worker set its metrics directory")
    configured = worker.metrics_dir
    if configured is None and os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        configured = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    directory, own = prepare_metrics_directory(configured)
    if own:
        atexit.register(remove_directory_of, os.getpid(), directory)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    return directory


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
            int | None, typer.Option(help="Serve Prometheus metrics here (OM_WORKER_METRICS_PORT).")
        ] = None,
        metrics_address: Annotated[
            str | None,
            typer.Option(
                help="Interface the metrics server listens on (OM_WORKER_METRICS_ADDRESS, 127.0.0.1)."
            ),
        ] = None,
    ) -> None:
        """Run a Celery worker for om's queues (om.sync first: blocking work is never behind background)."""
        from om_core.bootstrap import check_profile_models, check_webhook_secrets, wait_for_schema
        from om_core.settings import ServerSettings
        from om_core.startup import StartupError, refuse_sqlite_with_broker, startup_line

        settings = ServerSettings()
        worker_settings = _worker_settings()
        refuse_sqlite_with_broker(settings, "worker")
        # as om serve does: a model without its key would fail every task this worker takes
        check_profile_models(settings.profile_document)
        # the worker signs webhook deliveries: a secret it cannot read would fail every one of them
        check_webhook_secrets(settings.profile_document)
        # a worker on an older schema would fail every task that writes what the newer one has
        wait_for_schema(
            settings.database_url, settings.schema_wait_seconds, lambda line: typer.echo(line, err=True)
        )
        _needs_broker(settings, "worker")
        port = metrics_port or worker_settings.metrics_port
        address = metrics_address or worker_settings.metrics_address
        details = [f"queues {queues}", f"{concurrency} {pool} processes"]
        if port:
            directory = _metrics_directory(worker_settings) if pool == "prefork" else None
            from om_workers.metrics import forget_finished_processes, start_metrics_server

            try:
                start_metrics_server(port, address)
            except OSError as error:
                raise StartupError(
                    f"the worker's metrics server cannot listen on {address}:{port} ({error.strerror}): "
                    "choose another port with --metrics-port (OM_WORKER_METRICS_PORT), or stop what "
                    "listens there"
                ) from None
            forget_finished_processes()
            where = f" (the pool's processes added up from {directory})" if directory else ""
            details.append(f"metrics on http://{address}:{port}/metrics{where}")
        celery_app = _celery_app(settings, worker_settings)
        typer.echo(startup_line("worker", settings, *details), err=True)
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
        from om_core.settings import ServerSettings
        from om_core.startup import check_schedule_file, refuse_sqlite_with_broker, startup_line

        settings = ServerSettings()
        worker_settings = _worker_settings()
        refuse_sqlite_with_broker(settings, "beat")
        _needs_broker(settings, "beat")
        check_schedule_file(schedule)
        celery_app = _celery_app(settings, worker_settings)
        typer.echo(startup_line("beat", settings, f"schedule file {schedule}"), err=True)
        celery_app.start(["beat", "--schedule", str(schedule), "-l", loglevel])

    @app.command()
    def flower(
        port: Annotated[int, typer.Option(min=1, max=65_535)] = 5555,
        address: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
        no_auth: Annotated[
            bool, typer.Option("--no-auth", help="Run without basic auth (loopback addresses only).")
        ] = False,
        generate_password: Annotated[
            bool,
            typer.Option(
                "--generate-password",
                help=f"Without OM_FLOWER_USER/OM_FLOWER_PASSWORD: user {FLOWER_USER!r} and a new random "
                "password, printed at start.",
            ),
        ] = False,
    ) -> None:
        """Run Flower (the Celery monitor) behind basic auth from OM_FLOWER_USER / OM_FLOWER_PASSWORD."""
        from om_core.settings import ServerSettings
        from om_core.startup import check_port_free, startup_line

        settings = ServerSettings()
        argv = ["flower", f"--port={port}", f"--address={address}"]
        if settings.flower_user and settings.flower_password is not None:
            user, password = settings.flower_user, settings.flower_password.get_secret_value()
            auth = f"basic auth as {user!r} (OM_FLOWER_USER, OM_FLOWER_PASSWORD)"
        elif generate_password:
            user, password = FLOWER_USER, secrets.token_urlsafe(18)
            auth = (
                f"basic auth as {user!r} with the password {password} (generated at start: set "
                "OM_FLOWER_USER and OM_FLOWER_PASSWORD to choose them)"
            )
        elif not no_auth:
            typer.echo(
                "error: refusing to start Flower without OM_FLOWER_USER and OM_FLOWER_PASSWORD: set them, "
                "or pass --generate-password",
                err=True,
            )
            raise typer.Exit(2)
        elif not _loopback(address):
            typer.echo(f"error: --no-auth is only allowed on a loopback address, not {address}", err=True)
            raise typer.Exit(2)
        else:
            user = password = ""
            auth = "no auth (--no-auth, loopback only)"
        if password:
            # through Flower's environment, not argv: a command line is readable by every local user (ps)
            os.environ["FLOWER_BASIC_AUTH"] = f"{user}:{password}"
        check_port_free(address, port, "om flower", "choose another with --port, or stop what listens there")
        _needs_broker(settings, "flower")
        celery_app = _celery_app(settings, _worker_settings())
        typer.echo(startup_line("flower", settings, f"http://{address}:{port}", auth), err=True)
        celery_app.start(argv)
