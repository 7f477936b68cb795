"""Stream names: which stream holds a thread's or a resource's record, and whose tenant it is."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from om_core.application.configuration import profile_scope
from om_core.application.deps import Deps
from om_core.application.profiles import check_profile_name, profile_layer, resource_kind
from om_core.application.repository import load_state
from om_core.domain.state import RecordState


class RecordNotFoundError(LookupError):
    def __init__(self, stream_id: str) -> None:
        super().__init__(f"no such thread or record: {stream_id}")
        self.stream_id = stream_id


def thread_stream_id(tenant: str, thread_id: str) -> str:
    return f"{tenant}/thread/{thread_id}"


def resource_stream_id(tenant: str, resource_id: str, profile: str | None = None) -> str:
    return f"{tenant}/{resource_kind(profile)}/{resource_id}"


class ProfileMismatchError(ValueError):
    """A request named another profile than the one the thread runs under."""

    def __init__(self, thread_id: str, current: str | None, requested: str) -> None:
        super().__init__(
            f"thread {thread_id!r} runs under profile {current or 'default'!r}, not {requested!r}: "
            "change it with PUT /v1/threads/{id} (within one scope), or use another thread"
        )
        self.thread_id = thread_id
        self.current = current
        self.requested = requested


class ResourceRequiredError(ValueError):
    """Resource scope keeps one record per resource: a thread with no resource id cannot be placed."""

    def __init__(self, thread_id: str) -> None:
        super().__init__(
            f"thread {thread_id!r} has no resource_id, which the resource scope needs: send resource_id with "
            "the messages or set it on the thread"
        )
        self.thread_id = thread_id


def thread_own_state(deps: Deps, tenant: str, thread_id: str, *, trust_cache: bool = False) -> RecordState:
    """The thread's own stream (its profile, resource and overrides). With ``trust_cache``, as this process
    last saw it, unverified and lent rather than copied, to be read only: for a caller whose compare-and-set
    on the thread's stream will tell it when that was stale (``place_thread``)."""
    stream_id = thread_stream_id(tenant, thread_id)
    held = deps.states.latest(stream_id) if trust_cache else None
    return held if held is not None else load_state(deps.records, deps.store, stream_id, deps.states)


def _profile_of(
    deps: Deps, tenant: str, thread_id: str, thread: RecordState, requested: str | None
) -> str | None:
    """The profile the thread runs under (None: the default). For a thread not created yet, the one the
    request names, once it is known to exist; for an existing one, a different name is refused."""
    wanted = check_profile_name(deps, tenant, requested)
    if thread.version == 0:
        return wanted
    if requested is not None and wanted != thread.profile:
        raise ProfileMismatchError(thread_id, thread.profile, requested)
    return thread.profile


@dataclass(frozen=True)
class Placement:
    """Where a thread's record lives: its stream, and the profile (name and options) it runs under."""

    stream_id: str
    profile: str | None
    layer: Mapping[str, Any]


def place_thread(
    deps: Deps,
    tenant: str,
    thread_id: str,
    resource_id: str | None = None,
    *,
    profile: str | None = None,
    trust_cache: bool = False,
) -> Placement:
    """The stream of the record a thread's messages belong to, and the thread's profile.

    The thread's profile decides. Thread scope: the thread's own stream. Resource scope: the resource's
    stream under that profile, shared by every thread of the resource running under it; the resource id
    comes from the request or from the thread's own stream, where ``PUT /threads`` recorded it.

    ``trust_cache`` places a thread-scoped thread from this process's last view of it, which only a
    writer or reader of the thread's own stream may use: reading or writing that stream tells it when the
    thread changed since (it was erased and created again under another profile), and it then places the
    thread again without the cache. A resource-scoped placement is always verified, since nothing done to
    the resource's stream would notice.
    """
    thread = thread_own_state(deps, tenant, thread_id, trust_cache=trust_cache)
    name = _profile_of(deps, tenant, thread_id, thread, profile)
    layer = profile_layer(deps, tenant, name)
    if profile_scope(layer) != "resource":
        return Placement(thread_stream_id(tenant, thread_id), name, layer)
    if trust_cache and thread.version:
        thread = thread_own_state(deps, tenant, thread_id)
        name = _profile_of(deps, tenant, thread_id, thread, profile)
        layer = profile_layer(deps, tenant, name)
        if profile_scope(layer) != "resource":
            return Placement(thread_stream_id(tenant, thread_id), name, layer)
    resource_id = resource_id if resource_id is not None else thread.resource_id
    if not resource_id:
        raise ResourceRequiredError(thread_id)
    return Placement(resource_stream_id(tenant, resource_id, name), name, layer)


def record_stream_for(
    deps: Deps, tenant: str, thread_id: str, resource_id: str | None = None, *, profile: str | None = None
) -> str:
    """The stream of the record a thread's messages belong to (``place_thread``)."""
    return place_thread(deps, tenant, thread_id, resource_id, profile=profile).stream_id


def tenant_of(stream_id: str) -> str:
    return stream_id.split("/", 1)[0]
