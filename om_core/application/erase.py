"""Use case: erase a thread, finally (see docs/architecture.md, "Erasure is final")."""

from __future__ import annotations

from om_core.application.deps import Deps
from om_core.application.streams import RecordNotFoundError, thread_stream_id


def erase_thread(deps: Deps, *, tenant: str, thread_id: str) -> int:
    """Erase the thread's stream and everything derived from it; returns the events removed.

    Raises RecordNotFoundError when the thread had no events. Work still in flight for it ends as a
    no-op, and a thread created again under the same id starts a lineage of its own.
    """
    stream_id = thread_stream_id(tenant, thread_id)
    removed = deps.store.delete_stream(stream_id)
    # never needed again: a re-created thread gets new positions, which a held state can never match
    deps.states.forget(stream_id)
    if removed == 0:
        raise RecordNotFoundError(stream_id)
    return removed
