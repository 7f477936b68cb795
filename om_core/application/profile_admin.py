"""Use cases managing a tenant's named profiles: create or replace, read, list, delete.

Each change is an event of the profile's stream (om_core/application/profiles.py says how profiles are
resolved), recording who made it and when.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from om_core.application.configuration import profile_scope
from om_core.application.deps import Deps
from om_core.application.ports import ThreadRow
from om_core.application.profiles import (
    ProfileNameError,
    ProfileNotFoundError,
    profile_layer,
    profile_stream_id,
    tenant_profile,
)
from om_core.application.unit_of_work import retry_on_conflict
from om_core.domain.events import ProfileDeleted, ProfileSet, to_new_event
from om_core.domain.profiles import (
    DEFAULT_PROFILE,
    PROFILE_NAME_PATTERN,
    ProfileChange,
    check_tenant_profile,
    valid_profile_name,
)
from om_core.domain.timeutil import format_time


class ProfileConflictError(Exception):
    """The change would move a live thread's record (its scope), or removes a profile threads still use."""

    def __init__(self, name: str, message: str, threads: list[str]) -> None:
        super().__init__(message)
        self.name = name
        self.threads = threads


@dataclass(frozen=True)
class ProfileView:
    name: str
    # "deployment": the profile file's, read-only over HTTP; "tenant": the caller's own
    source: str
    options: dict[str, Any]
    scope: str
    version: int
    changes: list[ProfileChange]


def describe_profile(deps: Deps, *, tenant: str, name: str) -> ProfileView:
    if name == DEFAULT_PROFILE or name in deps.profiles:
        options = dict(profile_layer(deps, tenant, name))
        return ProfileView(name, "deployment", options, profile_scope(options), 0, [])
    state = tenant_profile(deps, tenant, name)
    if state.options is None:
        raise ProfileNotFoundError(name)
    return ProfileView(
        name, "tenant", state.options, profile_scope(state.options), state.version, state.changes
    )


def list_profiles(deps: Deps, *, tenant: str) -> list[ProfileView]:
    """The deployment's profiles, then the tenant's own, by name."""
    names = [DEFAULT_PROFILE, *sorted(deps.profiles)]
    prefix = profile_stream_id(tenant, "")
    names += [s.removeprefix(prefix) for s in deps.store.iter_streams(prefix)]
    views = []
    for name in names:
        try:
            views.append(describe_profile(deps, tenant=tenant, name=name))
        except ProfileNotFoundError:
            continue  # deleted
    return views


KeyCheck = Callable[[Mapping[str, Any]], None]


def put_profile(
    deps: Deps,
    *,
    tenant: str,
    name: str,
    options: Mapping[str, Any],
    by: str,
    check_keys: KeyCheck,
) -> ProfileView:
    """Create or replace a tenant's profile. Validated as a profile file is (ConfigError naming the option,
    a model without its API key included) before anything is stored; a change of scope while threads run
    under the profile is a ProfileConflictError, since a thread's record cannot move to another stream."""
    _check_name(deps, name)
    config = check_tenant_profile(options)
    check_keys(options)
    stream_id = profile_stream_id(tenant, name)

    def attempt() -> ProfileView:
        current = tenant_profile(deps, tenant, name)
        if current.options is not None and profile_scope(current.options) != config.scope:
            _refuse_if_used(
                deps,
                tenant,
                name,
                f"profile {name!r} keeps {profile_scope(current.options)}-scoped records; its threads' "
                f"records cannot move to {config.scope} scope: create a profile under another name",
            )
        event = ProfileSet(name=name, options=dict(options), by=by, at=format_time(deps.clock()))
        deps.store.append(stream_id, [to_new_event(event, metadata={"tenant": tenant})], current.version)
        return describe_profile(deps, tenant=tenant, name=name)

    return retry_on_conflict(attempt)


def delete_profile(deps: Deps, *, tenant: str, name: str, by: str) -> None:
    """Remove a tenant's profile; refused while a thread runs under it (its memory would have no
    configuration). Its history stays in its stream."""
    _check_name(deps, name)
    stream_id = profile_stream_id(tenant, name)

    def attempt() -> None:
        current = tenant_profile(deps, tenant, name)
        if current.options is None:
            raise ProfileNotFoundError(name)
        _refuse_if_used(deps, tenant, name, f"profile {name!r} is in use: move or erase its threads first")
        event = ProfileDeleted(name=name, by=by, at=format_time(deps.clock()))
        deps.store.append(stream_id, [to_new_event(event, metadata={"tenant": tenant})], current.version)

    retry_on_conflict(attempt)


def _check_name(deps: Deps, name: str) -> None:
    if not valid_profile_name(name):
        raise ProfileNameError(name, f"must match {PROFILE_NAME_PATTERN}")
    if name == DEFAULT_PROFILE or name in deps.profiles:
        raise ProfileNameError(
            name, "is a profile of the deployment's profile file, which only it can change"
        )


def threads_under(deps: Deps, tenant: str, name: str, limit: int = 20) -> list[ThreadRow]:
    """Some of the tenant's threads running under profile ``name`` (at most ``limit``)."""
    return deps.records.list_threads(tenant, profile=name, limit=limit)


def _refuse_if_used(deps: Deps, tenant: str, name: str, message: str) -> None:
    users = threads_under(deps, tenant, name)
    if users:
        raise ProfileConflictError(name, message, sorted(row.thread_id for row in users))
