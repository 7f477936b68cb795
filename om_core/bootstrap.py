"""The composition root: wires the adapters into ``Deps`` for the API, the workers and the CLI."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from om_core.adapters.inline_dispatcher import InlineDispatcher
from om_core.adapters.models.litellm_gateway import LiteLLMGateway, RetryPolicy
from om_core.adapters.models.model_ids import check_model_credentials
from om_core.adapters.store.migrations import upgrade_to_head
from om_core.adapters.store.sql_store import create_event_store
from om_core.application.ports import ModelGateway, WorkDispatcher
from om_core.application.records import Deps
from om_core.application.state_cache import DEFAULT_CAPACITY, StateCache
from om_core.application.work import run_task
from om_core.domain.config import MemoryConfig, ModelByInputTokens, parse_memory_config
from om_core.domain.thresholds import DEFAULT_MODEL


def build_deps(
    *,
    database_url: str,
    dispatcher: WorkDispatcher,
    profile: Mapping[str, Any] | None = None,
    models: ModelGateway | None = None,
    migrate: bool = False,
    max_message_bytes: int = 1_000_000,
    sync_wait_seconds: float = 10.0,
    state_cache_size: int = DEFAULT_CAPACITY,
) -> Deps:
    """``migrate`` upgrades the schema first: the embedded SQLite mode does it on start, a Postgres
    deployment runs ``om migrate`` once instead. A profile naming a cloud model whose API key is not set
    fails here, at start-up, with the variable to set, rather than at the first observation."""
    if models is None:
        models = model_gateway_for(profile)
    if migrate:
        upgrade_to_head(database_url)
    return Deps(
        store=create_event_store(database_url),
        models=models,
        dispatcher=dispatcher,
        profile=dict(profile or {}),
        max_message_bytes=max_message_bytes,
        sync_wait_seconds=sync_wait_seconds,
        states=StateCache(state_cache_size),
    )


def build_inline(
    *,
    database_url: str,
    profile: Mapping[str, Any] | None = None,
    background: bool = False,
    migrate: bool = True,
    models: ModelGateway | None = None,
) -> tuple[Deps, InlineDispatcher]:
    """Everything in this process: the inline executor runs model work right after the commit that asks
    for it (or on one background thread)."""
    dispatcher = InlineDispatcher(background=background)
    deps = build_deps(
        database_url=database_url, dispatcher=dispatcher, profile=profile, models=models, migrate=migrate
    )
    dispatcher.bind(lambda task, stream, cycle: run_task(deps, task, stream, cycle))
    return deps, dispatcher


def model_gateway_for(profile: Mapping[str, Any] | None) -> LiteLLMGateway:
    """The gateway for a server profile: its cloud models' keys are checked now, and transient errors are
    retried as its ``modelRetry`` says."""
    config = parse_memory_config(profile or {})
    check_model_credentials(configured_models(config))
    return LiteLLMGateway(retry_policy=retry_policy(config))


def configured_models(config: MemoryConfig) -> list[str]:
    """Every model the profile can call: each role's model, every ModelByInputTokens tier, the embedder."""
    found: list[str] = []
    for spec in (config.model, config.observation.model, config.reflection.model):
        if isinstance(spec, ModelByInputTokens):
            found.extend(spec.up_to.values())
        elif isinstance(spec, str):
            found.append(spec)
    found = [DEFAULT_MODEL if model == "default" else model for model in found]
    if config.model is None and config.observation.model is None and config.reflection.model is None:
        found.append(DEFAULT_MODEL)
    if config.retrieval is not None and config.retrieval.vector:
        found.append(config.retrieval.embedder)
    return list(dict.fromkeys(found))


def retry_policy(config: MemoryConfig) -> RetryPolicy:
    retry = config.model_retry
    return RetryPolicy(
        max_retries=retry.max_retries,
        initial_delay_s=retry.initial_delay_ms / 1000,
        max_delay_s=retry.max_delay_ms / 1000,
        jitter=retry.jitter,
    )
