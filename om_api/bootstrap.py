"""The API runtime's composition root: the ``Deps`` ``om serve`` answers with, and what its routes are
handed beside them (the engine's metrics).

With a real broker, model work is published to the Celery workers (the worker root's ``Deps``); with
``memory://`` (``om serve --embedded``) a real Celery worker runs the same tasks inside this process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from om_core.adapters.store.migrations import upgrade_to_head
from om_core.application.chat import LOCAL_CHAT_MODEL, ChatProxy
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


def build_chat_proxy(settings: ServerSettings, *profiles: Mapping[str, Any]) -> ChatProxy:
    """The OpenAI-compatible proxy's models: the chat models of the deployment's profiles (not the local
    extractive model or an embedder), those ``OM_CHAT_MODELS`` adds, and the keyless ``om-local/chat``."""
    from om_core.adapters.models.litellm_gateway import LiteLLMGateway, RetryPolicy
    from om_core.adapters.models.model_ids import OM_LOCAL_PROVIDER, provider_of
    from om_core.bootstrap import model_options
    from om_core.domain.config import parse_memory_config

    from_profile = [
        model
        for profile in profiles
        for option, model in model_options(parse_memory_config(profile))
        if option != "retrieval.embedder" and provider_of(model) != OM_LOCAL_PROVIDER
    ]
    for model in settings.chat_models:
        # an unusable id stops the server at start-up rather than at the first request
        provider_of(model)
    offered = tuple(dict.fromkeys([*from_profile, *settings.chat_models, LOCAL_CHAT_MODEL]))
    return ChatProxy(
        models=LiteLLMGateway(RetryPolicy(max_retries=0)),
        offered=offered,
        forward_provider_key=settings.chat_forward_provider_key,
    )


def render_engine_metrics() -> bytes:
    """The engine's metrics (appends, model calls, outbox), from the registry the workers share."""
    from om_workers.metrics import render_latest

    return render_latest()[0]
