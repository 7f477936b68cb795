"""The API runtime's composition root: the ``Deps`` ``om serve`` answers with, and what its routes are
handed beside them (the engine's metrics).

With a real broker, model work is published to the Celery workers (the worker root's ``Deps``); with
``memory://`` (``om serve --embedded``) a real Celery worker runs the same tasks inside this process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from om_core.adapters.store.migrations import upgrade_to_head
from om_core.application.deps import Deps
from om_core.settings import EMBEDDED_BROKER_URL, ServerSettings

if TYPE_CHECKING:
    from om_workers.settings import WorkerSettings

StopFn = Callable[[], None]


def build_api_deps(settings: ServerSettings) -> tuple[Deps, list[StopFn]]:
    """The server's Deps, and what to stop when it shuts down (the embedded worker, if there is one)."""
    if settings.broker_url.startswith("memory://"):
        deps, stop = build_embedded(settings)
        return deps, [stop]
    from om_workers.app import create_app as create_celery_app
    from om_workers.bootstrap import build_worker_deps

    return build_worker_deps(create_celery_app(settings), settings), []


def build_embedded(
    settings: ServerSettings | None = None, *, worker: WorkerSettings | None = None, concurrency: int = 2
) -> tuple[Deps, StopFn]:
    """Deps whose model work runs on an in-process Celery worker, and the function that stops it.

    The broker is forced to ``memory://``: a message published here can only be consumed here.
    """
    from om_workers.app import create_app_with_runtime
    from om_workers.embedded import start_embedded_worker
    from om_workers.tasks import warm_up

    settings = (settings or ServerSettings()).model_copy(update={"broker_url": EMBEDDED_BROKER_URL})
    if settings.database_url.startswith("sqlite"):
        upgrade_to_head(settings.database_url)
    app, runtime = create_app_with_runtime(settings, worker, main="om-embedded")
    deps = runtime.deps()
    warm_up()
    stop_worker = start_embedded_worker(app, concurrency=concurrency)

    def stop() -> None:
        stop_worker()
        deps.close()

    return deps, stop


def render_engine_metrics() -> bytes:
    """The engine's metrics (appends, model calls, outbox), from the registry the workers share."""
    from om_workers.metrics import render_latest

    return render_latest()[0]
