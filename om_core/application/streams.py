"""Stream names: which stream holds a thread's or a resource's record, and whose tenant it is."""

from __future__ import annotations

from om_core.application.configuration import profile_scope
from om_core.application.deps import Deps
from om_core.application.repository import load_state


class RecordNotFoundError(LookupError):
    def __init__(self, stream_id: str) -> None:
        super().__init__(f"no such thread or record: {stream_id}")
        self.stream_id = stream_id


def thread_stream_id(tenant: str, thread_id: str) -> str:
    return f"{tenant}/thread/{thread_id}"


def resource_stream_id(tenant: str, resource_id: str) -> str:
    return f"{tenant}/resource/{resource_id}"


class ResourceRequiredError(ValueError):
    """Resource scope keeps one record per resource: a thread with no resource id cannot be placed."""

    def __init__(self, thread_id: str) -> None:
        super().__init__(
            f"thread {thread_id!r} has no resource_id, which the resource scope needs: send resource_id with "
            "the messages or set it on the thread"
        )
        self.thread_id = thread_id


def record_stream_for(deps: Deps, tenant: str, thread_id: str, resource_id: str | None = None) -> str:
    """The stream of the record a thread's messages belong to.

    Thread scope: the thread's own stream. Resource scope (a server-profile setting): the resource's
    stream, shared by every thread of the resource; the resource id comes from the request or from the
    thread's own stream, where ``PUT /threads`` recorded it.
    """
    thread_stream = thread_stream_id(tenant, thread_id)
    if profile_scope(deps.profile) != "resource":
        return thread_stream
    if resource_id is None:
        resource_id = load_state(deps.records, deps.store, thread_stream, deps.states).resource_id
    if not resource_id:
        raise ResourceRequiredError(thread_id)
    return resource_stream_id(tenant, resource_id)


def tenant_of(stream_id: str) -> str:
    return stream_id.split("/", 1)[0]
