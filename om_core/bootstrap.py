"""The composition root: wires the adapters into ``Deps`` for the API, the workers and the CLI."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from om_core.adapters.inline_dispatcher import InlineDispatcher
from om_core.adapters.models.litellm_gateway import LiteLLMGateway
from om_core.adapters.store.migrations import upgrade_to_head
from om_core.adapters.store.sql_store import create_event_store
from om_core.application.ports import ModelGateway, WorkDispatcher
from om_core.application.records import Deps
from om_core.application.work import run_task


def build_deps(
    *,
    database_url: str,
    dispatcher: WorkDispatcher,
    profile: Mapping[str, Any] | None = None,
    models: ModelGateway | None = None,
    migrate: bool = False,
    max_message_bytes: int = 1_000_000,
    sync_wait_seconds: float = 10.0,
) -> Deps:
    """``migrate`` upgrades the schema first: the embedded SQLite mode does it on start, a Postgres
    deployment runs ``om migrate`` once instead."""
    if migrate:
        upgrade_to_head(database_url)
    return Deps(
        store=create_event_store(database_url),
        models=models or LiteLLMGateway(),
        dispatcher=dispatcher,
        profile=dict(profile or {}),
        max_message_bytes=max_message_bytes,
        sync_wait_seconds=sync_wait_seconds,
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
