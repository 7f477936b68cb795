"""Named memory profiles: the one place a record finds the configuration it runs under.

A profile is either the deployment's (the profile file: ``default`` and any named ones, the same in every
process) or a tenant's own, kept as an event stream ``{tenant}/profile/{name}``: each change is a
``ProfileSet`` or ``ProfileDeleted`` saying who made it and when, so a change applies from the next
decision, never rewrites what was decided before, and time travel can show the configuration as it was.
A tenant's profile cannot take a deployment profile's name, so a name means one thing per tenant.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from om_core.application.configuration import record_config
from om_core.application.deps import Deps
from om_core.domain.config import MemoryConfig
from om_core.domain.events import from_recorded
from om_core.domain.profiles import (
    DEFAULT_PROFILE,
    PROFILE_NAME_PATTERN,
    ProfileState,
    fold_profile,
    valid_profile_name,
)
from om_core.domain.state import RecordState

# a resource's record kept under a named profile lives in ``{tenant}/resource@{profile}/{resource id}``:
# two agents sharing a user (one resource id) keep apart memories, and the default profile's streams keep
# the names they had before profiles existed
_RESOURCE_KIND = "resource"


class ProfileNotFoundError(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no memory profile named {name!r}")
        self.name = name


class UnknownProfileError(ProfileNotFoundError):
    """A thread was to be put under a profile that does not exist: bad input, not a missing resource."""


class ProfileNameError(ValueError):
    def __init__(self, name: str, rule: str) -> None:
        super().__init__(f"profile name {name!r}: {rule}")
        self.name = name


def profile_stream_id(tenant: str, name: str) -> str:
    return f"{tenant}/profile/{name}"


def resource_kind(profile: str | None) -> str:
    """The kind segment of a resource record's stream id under ``profile``."""
    return _RESOURCE_KIND if profile in (None, DEFAULT_PROFILE) else f"{_RESOURCE_KIND}@{profile}"


def is_record_stream(stream_id: str) -> bool:
    """Whether the stream holds a record (a thread or a resource), not a profile."""
    kind = stream_id.split("/", 2)[1] if stream_id.count("/") >= 2 else ""
    return kind == "thread" or kind == _RESOURCE_KIND or kind.startswith(f"{_RESOURCE_KIND}@")


def record_profile(state: RecordState) -> str | None:
    """The profile a record runs under: a resource's is in its stream's name, a thread's in its events."""
    kind = state.stream_id.split("/", 2)[1] if state.stream_id.count("/") >= 2 else ""
    if kind.startswith(f"{_RESOURCE_KIND}@"):
        return kind.removeprefix(f"{_RESOURCE_KIND}@")
    return state.profile


def _tenant_of(stream_id: str) -> str:
    return stream_id.split("/", 1)[0]


def tenant_profile(deps: Deps, tenant: str, name: str, at_position: int | None = None) -> ProfileState:
    recorded = deps.store.read_stream(profile_stream_id(tenant, name))
    if at_position is not None:
        recorded = [r for r in recorded if r.global_position <= at_position]
    return fold_profile(name, [from_recorded(r) for r in recorded])


def profile_layer(
    deps: Deps, tenant: str, name: str | None, *, at_position: int | None = None
) -> Mapping[str, Any]:
    """The options of profile ``name`` (None: the default), as of the event at ``at_position`` when given.

    Deployment profiles are what this process loaded; a tenant's are read from their stream each time,
    so a change made through any process applies from the next decision everywhere.
    """
    if name in (None, DEFAULT_PROFILE):
        return deps.profile
    assert name is not None
    if name in deps.profiles:
        return deps.profiles[name]
    state = tenant_profile(deps, tenant, name, at_position)
    if state.options is None:
        raise ProfileNotFoundError(name)
    return state.options


def config_of(deps: Deps, state: RecordState, *, at_position: int | None = None) -> MemoryConfig:
    """The configuration a record runs under: its profile with the thread's own overrides on top."""
    layer = profile_layer(deps, _tenant_of(state.stream_id), record_profile(state), at_position=at_position)
    return record_config(layer, state)


def check_profile_name(deps: Deps, tenant: str, name: str | None) -> str | None:
    """The profile a new thread is put under (None: the default), once it is known to exist."""
    if name in (None, DEFAULT_PROFILE):
        return None
    assert name is not None
    if not valid_profile_name(name):
        raise ProfileNameError(name, f"must match {PROFILE_NAME_PATTERN}")
    try:
        profile_layer(deps, tenant, name)
    except ProfileNotFoundError:
        raise UnknownProfileError(name) from None
    return name
