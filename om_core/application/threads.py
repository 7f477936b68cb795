"""Use cases reading threads: one thread, the record its messages belong to, that record's status and
head, and the tenant's threads.

A thread that never existed, was erased or belongs to another tenant is one answer, RecordNotFoundError
naming the thread's own stream, whichever stream was looked at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from om_core.application.deps import Deps
from om_core.application.ports import ThreadRow
from om_core.application.profiles import config_of
from om_core.application.repository import load_state
from om_core.application.streams import (
    RecordNotFoundError,
    ResourceRequiredError,
    record_stream_for,
    thread_stream_id,
)
from om_core.domain.config import MemoryConfig, ModelByInputTokens
from om_core.domain.context import build_status, om_metadata
from om_core.domain.profiles import DEFAULT_PROFILE
from om_core.domain.state import RecordState
from om_core.domain.thresholds import Role, resolve_model_route


@dataclass(frozen=True)
class ThreadView:
    """A thread's own fields; ``metadata`` carries the memory's state under ``mastra.om`` when asked for,
    where Mastra's clients read it. ``models``: the models each role may call (``role_models``)."""

    thread_id: str
    resource_id: str | None
    title: str | None
    metadata: dict[str, Any]
    config: dict[str, Any]
    version: int
    models: dict[str, list[str]]
    profile: str
    # when the thread's own record was last written (ISO 8601), as the list of threads says
    updated_at: str | None = None

    @classmethod
    def of(
        cls,
        state: RecordState,
        thread_id: str,
        config: MemoryConfig,
        om: dict[str, Any] | None = None,
        *,
        updated_at: str | None = None,
    ) -> ThreadView:
        metadata = dict(state.thread_metadata)
        if om:
            mastra = metadata.get("mastra")
            metadata["mastra"] = {**(mastra if isinstance(mastra, dict) else {}), "om": om}
        return cls(
            thread_id=state.thread_id or thread_id,
            resource_id=state.resource_id,
            title=state.title,
            metadata=metadata,
            config=state.config_overrides,
            version=state.version,
            models=role_models(config),
            profile=state.profile or DEFAULT_PROFILE,
            updated_at=updated_at,
        )


def role_models(config: MemoryConfig) -> dict[str, list[str]]:
    """The models the Observer and the Reflector may call under ``config``, as ``resolve_model`` picks
    them: one, one per ``upTo`` tier (smallest inputs first) when the model is chosen by input size, or
    the enabled entries of a model list in the order they are tried.

    A client cannot resolve the profile, the thread's overrides, the role fallbacks and ``"default"``
    itself; which model a call actually used is in the usage of its cycle.
    """
    bounds = sorted(
        {
            bound
            for spec in (config.model, config.observation.model, config.reflection.model)
            if isinstance(spec, ModelByInputTokens)
            for bound in spec.up_to
        }
    )
    # an input over the largest bound goes to the largest tier, so probing each bound reaches every tier
    probes = bounds or [0]
    roles: tuple[Role, ...] = ("observer", "reflector")
    return {
        role: list(dict.fromkeys(c.model for n in probes for c in resolve_model_route(config, role, n)))
        for role in roles
    }


@dataclass(frozen=True)
class RecordHead:
    stream_id: str
    version: int


def thread_state(deps: Deps, *, tenant: str, thread_id: str) -> RecordState:
    """The thread's own stream folded (its title, metadata and overrides; in thread scope, its record)."""
    stream_id = thread_stream_id(tenant, thread_id)
    state = load_state(deps.records, deps.store, stream_id, deps.states)
    if state.version == 0:
        raise RecordNotFoundError(stream_id)
    return state


def describe_thread(deps: Deps, *, tenant: str, thread_id: str) -> ThreadView:
    state = thread_state(deps, tenant=tenant, thread_id=thread_id)
    config = config_of(deps, state)
    updated_at = thread_updated_at(deps, tenant=tenant, thread_id=thread_id)
    return ThreadView.of(state, thread_id, config, om_metadata(state, config), updated_at=updated_at)


def thread_updated_at(deps: Deps, *, tenant: str, thread_id: str) -> str | None:
    """When the thread's own record row was last written: the moment the list of threads orders by."""
    rows = deps.records.list_threads(tenant, thread_ids=[thread_id], limit=1)
    return rows[0].updated_at.isoformat() if rows and rows[0].updated_at else None


def record_stream(deps: Deps, *, tenant: str, thread_id: str) -> str:
    """The stream holding the thread's record: its own, or its resource's in resource scope."""
    try:
        return record_stream_for(deps, tenant, thread_id)
    except ResourceRequiredError:
        # a thread that was never placed in a resource has no record to read
        raise RecordNotFoundError(thread_stream_id(tenant, thread_id)) from None


def record_state(deps: Deps, *, tenant: str, thread_id: str) -> RecordState:
    """The record the thread's messages belong to."""
    state = load_state(
        deps.records, deps.store, record_stream(deps, tenant=tenant, thread_id=thread_id), deps.states
    )
    if state.version == 0:
        raise RecordNotFoundError(thread_stream_id(tenant, thread_id))
    return state


def record_head(deps: Deps, *, tenant: str, thread_id: str) -> RecordHead:
    """The record's stream and its current version, without folding it."""
    stream_id = record_stream(deps, tenant=tenant, thread_id=thread_id)
    version = deps.store.stream_version(stream_id)
    if version == 0:
        raise RecordNotFoundError(thread_stream_id(tenant, thread_id))
    return RecordHead(stream_id, version)


def record_status(deps: Deps, *, tenant: str, thread_id: str) -> dict[str, Any]:
    """The ``data-om-status`` object of the thread's record."""
    state = record_state(deps, tenant=tenant, thread_id=thread_id)
    reader = thread_id if state.thread_id is None else None
    return build_status(state, config_of(deps, state), reader_thread=reader)


def threads_of(
    deps: Deps, *, tenant: str, resource_id: str | None = None, limit: int = 100, offset: int = 0
) -> list[ThreadRow]:
    """The tenant's threads (of one resource when given), most recently updated first."""
    return deps.records.list_threads(tenant, resource_id=resource_id, limit=limit, offset=offset)
