"""The turn use case: append the user's message and return the context to send, in one call.

An agent's critical path before its model call is then one round trip (docs/api.md, A turn in one
request). The read starts from the state the append just committed, which this process holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from om_core.application.append import AppendOutcome, append_messages
from om_core.application.context import ContextRead, read_context
from om_core.application.deps import Deps


@dataclass(frozen=True)
class TurnOutcome:
    appended: AppendOutcome
    read: ContextRead


def take_turn(
    deps: Deps,
    *,
    tenant: str,
    thread_id: str,
    messages: Sequence[Mapping[str, Any]],
    resource_id: str | None = None,
    caller_model: str | None = None,
    profile: str | None = None,
    wait: bool = True,
    caller_provider_options: Mapping[str, Any] | None = None,
) -> TurnOutcome:
    """Append ``messages`` (the turn's user message, and anything the app had not sent yet), then read
    the context as ``get_context`` does, blockAfter enforced unless ``wait`` is false."""
    appended = append_messages(
        deps,
        tenant=tenant,
        thread_id=thread_id,
        messages=messages,
        resource_id=resource_id,
        caller_model=caller_model,
        profile=profile,
    )
    # the read starts from the state the append committed: no second round trip to the store
    read = read_context(
        deps,
        tenant=tenant,
        thread_id=thread_id,
        caller_model=caller_model,
        wait=wait,
        start=appended.state,
        caller_provider_options=caller_provider_options,
    )
    return TurnOutcome(appended=appended, read=read)
