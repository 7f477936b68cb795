"""The inline runtime's composition root (``build_inline``: everything in this process, as the CLI and an
in-process Python user run it), and the building blocks the worker's and the API's roots
(``om_workers/bootstrap.py``, ``om_api/bootstrap.py``) build their ``Deps`` with from ``ServerSettings``."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa

from om_core.adapters.inline_dispatcher import InlineDispatcher
from om_core.adapters.models.litellm_gateway import LiteLLMGateway, RetryPolicy
from om_core.adapters.models.model_ids import KEYLESS_MODEL, check_model_credentials, missing_api_key
from om_core.adapters.store import DEFAULT_MAX_OVERFLOW, DEFAULT_POOL_SIZE, create_event_store
from om_core.adapters.store.migrations import alembic_config, current_revision, upgrade_to_head
from om_core.application.deps import Deps
from om_core.application.ports import ModelGateway, WorkDispatcher
from om_core.application.state_cache import DEFAULT_CAPACITY, StateCache
from om_core.application.work import run_task
from om_core.domain.config import (
    ConfigError,
    ConfigProblem,
    MemoryConfig,
    ModelByInputTokens,
    merge_config_layers,
    parse_memory_config,
    webhook_secret,
)
from om_core.domain.profiles import split_profile_document
from om_core.domain.thresholds import DEFAULT_MODEL, Role, resolve_model
from om_core.settings import ServerSettings


class SchemaNotMigratedError(RuntimeError):
    """The database's schema is older than this om's: ``om migrate`` has not been run on it (yet)."""

    def __init__(self, revision: str | None, head: str) -> None:
        self.revision = revision
        self.head = head
        found = f"at revision {revision}" if revision else "empty"
        super().__init__(f"the database schema is {found}, not at {head}")


class SchemaTooNewError(RuntimeError):
    """The database's schema is at a revision this om does not know: a newer om migrated it."""

    def __init__(self, revision: str, head: str) -> None:
        self.revision = revision
        self.head = head
        super().__init__(
            f"the database schema is at revision {revision}, newer than this om's {head}: "
            "run the om version that migrated it (every process of a deployment on the same version)"
        )


def prepare_database(database_url: str) -> None:
    """Make sure the schema is at head before a process uses the database. SQLite is the embedded store
    and is migrated here, as ``om serve --embedded`` does; any other database is migrated once per deploy by
    ``om migrate``, so here it is only checked (SchemaNotMigratedError, SchemaTooNewError). An unreachable
    database fails here too, with the driver's error, rather than at the first request."""
    if database_url.startswith("sqlite"):
        upgrade_to_head(database_url)
        return
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config(database_url))
    head = str(scripts.get_current_head())
    revision = current_revision(database_url)
    if revision == head:
        return
    if revision is not None and revision not in {script.revision for script in scripts.walk_revisions()}:
        raise SchemaTooNewError(revision, head)
    raise SchemaNotMigratedError(revision, head)


# how many times a start-up check of the database is tried when its connection fails
_START_ATTEMPTS = 3


def wait_for_schema(
    database_url: str, wait_seconds: float, say: Callable[[str], None], *, poll_seconds: float = 1.0
) -> None:
    """``prepare_database``, waiting up to ``wait_seconds`` for a schema that is behind to be migrated
    (``OM_SCHEMA_WAIT_SECONDS``: a process an orchestrator starts beside the migration). It says once that
    it waits; past the wait, the schema's error is raised as without one."""
    deadline = time.monotonic() + wait_seconds
    said = False
    dropped = 0
    while True:
        try:
            prepare_database(database_url)
            return
        except sa.exc.OperationalError:
            # a connection dropped under the check (a failover, a terminated backend) is tried again a
            # few times; a database that stays unreachable is reported as such
            dropped += 1
            if dropped >= _START_ATTEMPTS:
                raise
            time.sleep(poll_seconds)
        except SchemaNotMigratedError as error:
            if time.monotonic() + poll_seconds > deadline:
                raise
            if not said:
                say(f"{error}: waiting up to {wait_seconds:.0f}s for `om migrate` (OM_SCHEMA_WAIT_SECONDS)")
                said = True
            time.sleep(poll_seconds)


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
    lease_seconds: float = 30.0,
    db_pool_size: int = DEFAULT_POOL_SIZE,
    db_max_overflow: int = DEFAULT_MAX_OVERFLOW,
) -> Deps:
    """``migrate`` upgrades the schema first: the embedded SQLite mode does it on start, a Postgres
    deployment runs ``om migrate`` once instead. A profile naming a cloud model whose API key is not set
    fails here, at start-up, with the variable to set, rather than at the first observation.

    ``profile`` is a profile file's document: one configuration, or ``profiles:`` naming several.
    """
    default, named = split_profile_document(profile or {})
    if models is None:
        models = model_gateway_for(profile)
    if migrate:
        upgrade_to_head(database_url)
    store = create_event_store(database_url, pool_size=db_pool_size, max_overflow=db_max_overflow)
    return Deps(
        # one SQL adapter plays every role of the store
        store=store,
        records=store,
        messages=store,
        outbox=store,
        index=store,
        locks=store,
        keys=store,
        leases=store,
        models=models,
        dispatcher=dispatcher,
        profile=default,
        profiles=named,
        max_message_bytes=max_message_bytes,
        sync_wait_seconds=sync_wait_seconds,
        lease_seconds=lease_seconds,
        states=StateCache(state_cache_size),
        close=store.close,
    )


def reading_deps(database_url: str, profile: Mapping[str, Any] | None) -> Deps:
    """Deps for a command that reads the store and calls no model (a replay, a profile lookup): no API
    key is checked or needed. The caller closes them."""
    return build_deps(
        database_url=database_url,
        dispatcher=InlineDispatcher(),
        profile=profile,
        models=LiteLLMGateway(RetryPolicy(max_retries=0)),
    )


def deps_from_settings(
    settings: ServerSettings, *, dispatcher: WorkDispatcher, models: ModelGateway, migrate: bool = False
) -> Deps:
    """``build_deps`` with what the server's settings say: its database, profile and limits."""
    return build_deps(
        database_url=settings.database_url,
        dispatcher=dispatcher,
        profile=settings.profile_document,
        models=models,
        migrate=migrate,
        max_message_bytes=settings.max_message_bytes,
        sync_wait_seconds=settings.sync_wait_seconds,
        state_cache_size=settings.state_cache_size,
        lease_seconds=settings.lease_seconds,
        db_pool_size=settings.db_pool_size,
        db_max_overflow=settings.db_max_overflow,
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
    """The gateway for a profile document: its cloud models' keys are checked now, and transient errors
    are retried as the default profile's ``modelRetry`` says."""
    check_profile_models(profile)
    default, _ = split_profile_document(profile or {})
    return LiteLLMGateway(retry_policy=retry_policy(parse_memory_config(default)))


def check_profile_models(profile: Mapping[str, Any] | None) -> None:
    """ModelConfigurationError when a model any profile of the document can call has no API key in the
    environment: what every process that runs model work checks at start."""
    default, named = split_profile_document(profile or {})
    for layer in (default, *named.values()):
        config = parse_memory_config(layer)
        check_model_credentials(
            [model for option, model in model_options(config) if _served_at(config, option, model) is None]
        )


def configured_models(config: MemoryConfig) -> list[str]:
    """Every model the profile can call: each role's model, every ModelByInputTokens tier and model-list
    entry, the embedder."""
    return list(dict.fromkeys(model for _, model in model_options(config)))


def model_options(config: MemoryConfig) -> list[tuple[str, str]]:
    """Every model a configuration can call, with the option that names it (``observation.model``,
    ``model.upTo.8000``, ``retrieval.embedder``; ``model`` for the default model when no role names one)."""
    found: list[tuple[str, str]] = []
    if not config.enabled:
        return found  # OM turned off calls no model
    for option, spec in (
        ("model", config.model),
        ("observation.model", config.observation.model),
        ("reflection.model", config.reflection.model),
    ):
        if isinstance(spec, ModelByInputTokens):
            found.extend((f"{option}.upTo.{bound}", model) for bound, model in spec.up_to.items())
        elif isinstance(spec, tuple):
            found.extend((f"{option}[{i}].model", e.model) for i, e in enumerate(spec) if e.enabled)
        elif isinstance(spec, str):
            found.append((option, spec))
    if config.model is None and config.observation.model is None and config.reflection.model is None:
        found.append(("model", DEFAULT_MODEL))
    if config.retrieval is not None and config.retrieval.vector:
        found.append(("retrieval.embedder", config.retrieval.embedder))
    return [(option, DEFAULT_MODEL if model == "default" else model) for option, model in found]


def check_thread_models(
    profile: Mapping[str, Any], overrides: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> None:
    """Refuse a thread's overrides when they make it call a model whose API key is not set: a ConfigError
    naming each such option and the variables to set. Checked when the overrides are set, as the profile's
    models are at start-up, so no context read later waits on a model that cannot be called.

    Only what the overrides add is reported: the profile's own models were checked when it was loaded (or
    its caller brought its own gateway)."""
    profile_missing = _keyless(parse_memory_config(profile), environ)
    problems = [
        ConfigProblem(
            option,
            model,
            f"needs {' or '.join(needed)} to be set in the server's environment "
            f"(or use the keyless local model {KEYLESS_MODEL!r})",
        )
        for option, model, needed in _keyless(
            parse_memory_config(merge_config_layers(profile, overrides)), environ
        )
        if (option, model, needed) not in profile_missing
    ]
    if problems:
        raise ConfigError.of(problems)


def check_webhook_secrets(
    profile: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None
) -> None:
    """WebhookSecretError when a webhook of any profile of the document names, as its ``secretEnv``, a
    variable not set here: what a worker, which signs the deliveries, checks at start."""
    default, named = split_profile_document(profile or {})
    for layer in (default, *named.values()):
        for hook in parse_memory_config(layer).webhooks:
            webhook_secret(hook, os.environ if environ is None else environ)


def check_profile_keys(profile: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> None:
    """Refuse a profile set over HTTP when a model it can call has no API key in the server's environment:
    a ConfigError naming each such option and the variables to set (a profile file is refused at start-up
    by ``check_profile_models`` instead)."""
    problems = [
        ConfigProblem(option, model, f"needs {' or '.join(needed)} to be set in the server's environment")
        for option, model, needed in _keyless(parse_memory_config(profile), environ)
    ]
    if problems:
        raise ConfigError.of(problems)


def _keyless(
    config: MemoryConfig, environ: Mapping[str, str] | None
) -> list[tuple[str, str, tuple[str, ...]]]:
    return [
        (option, model, needed)
        for option, model in model_options(config)
        if (needed := missing_api_key(model, environ, api_base=_served_at(config, option, model)))
    ]


def _served_at(config: MemoryConfig, option: str, model: str) -> str | None:
    """The ``modelSettings.apiBase`` the calls to ``model`` go to when every role that calls it names one;
    None when any call goes to the provider itself (the embedder's always do)."""
    if option == "retrieval.embedder":
        return None
    callers: tuple[tuple[Role, str | None], ...] = (
        ("observer", config.observation.model_settings.api_base),
        ("reflector", config.reflection.model_settings.api_base),
    )
    bases = [base for role, base in callers if model in _role_models(config, role)]
    return bases[0] if bases and all(bases) else None


def _role_models(config: MemoryConfig, role: Role) -> set[str]:
    """Every model a role's calls can go to: its model, or one per ModelByInputTokens tier."""
    bounds = {1}
    for spec in (config.model, config.observation.model, config.reflection.model):
        if isinstance(spec, ModelByInputTokens):
            bounds.update(spec.up_to)
    return {resolve_model(config, role, bound) for bound in bounds}


def retry_policy(config: MemoryConfig) -> RetryPolicy:
    retry = config.model_retry
    return RetryPolicy(
        max_retries=retry.max_retries,
        initial_delay_s=retry.initial_delay_ms / 1000,
        max_delay_s=retry.max_delay_ms / 1000,
        jitter=retry.jitter,
    )
