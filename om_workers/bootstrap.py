"""The worker runtime's composition root: the ``Deps`` a process that publishes to a Celery app runs with.

A worker process builds them (``WorkerRuntime``), and so does the API, whose model work the workers run.
"""

from __future__ import annotations

from celery import Celery

from om_core.application.deps import Deps
from om_core.bootstrap import deps_from_settings, model_gateway_for
from om_core.settings import ServerSettings
from om_workers import metrics
from om_workers.dispatcher import CeleryDispatcher


def build_worker_deps(app: Celery, settings: ServerSettings, *, migrate: bool = False) -> Deps:
    """Deps for a process that publishes to ``app``: metered store and models, the Celery dispatcher."""
    dispatcher = CeleryDispatcher(app)
    deps = deps_from_settings(
        settings,
        dispatcher=dispatcher,
        models=metrics.MeteredModelGateway(model_gateway_for(settings.profile_document)),
        migrate=migrate,
    )
    deps.store = metrics.MeteredEventStore(deps.store)
    metrics.watch_state_replays()
    dispatcher.bind(deps.outbox)
    return deps
