"""The unit of work of every use case: a plan of events and tasks, committed with compare-and-set, retried
on a lost race (cosmicpython's unit of work)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from om_core.application.deps import Deps
from om_core.application.ports import ConcurrencyError
from om_core.application.repository import snapshot_of
from om_core.application.streams import tenant_of
from om_core.application.webhooks import webhook_tasks
from om_core.domain.envelope import NewEvent, TaskRequest
from om_core.domain.events import DomainEvent, to_new_event
from om_core.domain.state import RecordState, evolve

MAX_CONFLICT_RETRIES = 50

T = TypeVar("T")


@dataclass
class Plan:
    """Events and outbox tasks decided for one commit, and the state they lead to.

    The plan takes ownership of the state it is given and evolves it in place as events are added: the
    caller must not keep using that state object as "before" (``base_version`` remembers where it was).
    A ``borrowed`` state is left as it is: the plan copies it when it adds its first event, so a plan that
    decides nothing (most reads) costs no copy.
    """

    state: RecordState
    base_version: int = -1
    base_position: int = 0
    # keep a copy of the state as it was just before the first event this says yes to (for callers that
    # describe that event relative to what came before it, e.g. the data parts of an activation)
    capture_before: Callable[[DomainEvent], bool] | None = None
    prior: tuple[int, RecordState] | None = None
    events: list[DomainEvent] = field(default_factory=list)
    event_ids: list[uuid.UUID | None] = field(default_factory=list)
    tasks: list[TaskRequest] = field(default_factory=list)
    sync_cycle: str | None = None
    sync_task: str | None = None
    borrowed: bool = False

    def __post_init__(self) -> None:
        if self.base_version < 0:
            self.base_version = self.state.version
            self.base_position = self.state.position

    def add(self, event: DomainEvent, *, event_id: uuid.UUID | None = None) -> None:
        if self.prior is None and self.capture_before is not None and self.capture_before(event):
            # a borrowed state stays as it was: it is the state before this event
            self.prior = (len(self.events), self.state if self.borrowed else self.state.fork())
        if self.borrowed:
            self.state = self.state.fork()
            self.borrowed = False
        self.events.append(event)
        self.event_ids.append(event_id)
        evolve(self.state, [event])


def commit(deps: Deps, plan: Plan, *, metadata: Mapping[str, Any] | None = None) -> int:
    """Append the plan's events with compare-and-set on the version it started from; returns the new one.

    Raises ConcurrencyError when another writer got there first: callers re-load and re-plan.
    """
    base_version = plan.base_version
    if not plan.events:
        return base_version
    stream_id = plan.state.stream_id
    meta = {"tenant": tenant_of(stream_id), **(metadata or {})}
    new_events: list[NewEvent] = [
        to_new_event(event, metadata=meta, event_id=event_id)
        for event, event_id in zip(plan.events, plan.event_ids, strict=True)
    ]
    # the lifecycle events the profile's webhooks subscribe to, delivered by the workers from the outbox
    tasks = [*plan.tasks, *webhook_tasks(deps, plan.events, new_events, stream_id, base_version)]
    plan.state.version = base_version + len(new_events)
    result = deps.store.append(
        stream_id,
        new_events,
        base_version,
        expected_position=plan.base_position or None,
        snapshot=snapshot_of(plan.state, tenant_of(stream_id)),
        tasks=tasks,
    )
    plan.state.position = result.global_positions[-1]
    plan.state.mark_log_stored()
    # the cache holds the committed state itself, and the plan now only lends it: an event added to the
    # plan afterwards starts from a copy, as must anyone else who changes ``plan.state``
    deps.states.keep(stream_id, result.global_positions[-1], plan.state)
    plan.borrowed = True
    if tasks:
        deps.dispatcher.dispatch(tasks)
    return result.last_version


def retry_on_conflict(operation: Callable[[], T]) -> T:
    """Run ``operation`` again after a lost compare-and-set; it must re-read what it depends on."""
    for _ in range(MAX_CONFLICT_RETRIES):
        try:
            return operation()
        except ConcurrencyError:
            continue
    return operation()
