"""Use cases for periodic maintenance, run by beat: the idle-TTL sweep and stuck-cycle recovery.

Both work on one record and commit with compare-and-set, so a sweep racing a reader or a task simply loses
and re-reads. Which records to visit is the caller's business (``EventStore.list_streams_with_pending_work``).
"""

from __future__ import annotations

from datetime import timedelta

from om_core.application.decisions import plan_decisions
from om_core.application.deps import Deps
from om_core.application.ports import DuplicateEventError
from om_core.application.profiles import config_of
from om_core.application.repository import load_state
from om_core.application.unit_of_work import Plan, commit, retry_on_conflict
from om_core.domain.events import (
    DomainEvent,
    ObservationBufferFailed,
    ReflectionFailed,
    SyncObservationFailed,
    effect_event_id,
)
from om_core.domain.timeutil import format_time, parse_time


def sweep_idle(deps: Deps, stream_id: str) -> int:
    """Let the policy act on a record nobody touches: idle-TTL activation (and ``bufferOnIdle``).

    Without the sweep, buffered chunks of an abandoned thread would wait for its next message or read.
    Returns the number of events committed (0 when there was nothing to do).
    """

    def attempt() -> int:
        state = load_state(deps.records, deps.store, stream_id, deps.states)
        if state.version == 0:
            return 0
        config = config_of(deps, state)
        plan = plan_decisions(Plan(state), config, deps.clock(), mode="idle")
        commit(deps, plan, metadata={"cause": "idle-sweep"})
        return len(plan.events)

    return retry_on_conflict(attempt)


def recover_stuck_cycles(deps: Deps, stream_id: str, older_than: timedelta) -> list[str]:
    """Record a timeout failure for every cycle of the record in flight for longer than ``older_than``.

    A task whose broker message was lost after publishing (a broker restart without persistence), or whose
    reader died before its synchronous fallback, would otherwise keep the record's cycle slot forever. The
    failure takes the cycle's deterministic outcome id, so a late genuine outcome is rejected as a duplicate
    instead of being applied after the failure; the policy then re-requests the work. Returns the cycle ids.
    """

    def attempt() -> list[str]:
        state = load_state(deps.records, deps.store, stream_id, deps.states)
        now = deps.clock()
        stamp = format_time(now)
        limit = now - older_than
        failures: list[tuple[str, DomainEvent]] = []
        reason = f"timeout: no outcome within {older_than.total_seconds():.0f}s"
        buffer = state.buffer_in_flight
        if buffer is not None and parse_time(buffer.requested_at) < limit:
            failures.append(
                (
                    buffer.cycle_id,
                    ObservationBufferFailed(
                        cycle_id=buffer.cycle_id, error=reason, attempts=0, failed_at=stamp
                    ),
                )
            )
        sync = state.sync_in_flight
        if sync is not None and parse_time(sync.started_at) < limit:
            failures.append(
                (
                    sync.cycle_id,
                    SyncObservationFailed(cycle_id=sync.cycle_id, error=reason, attempts=0, failed_at=stamp),
                )
            )
        reflection = state.reflection_in_flight
        if reflection is not None and parse_time(reflection.requested_at) < limit:
            failures.append(
                (
                    reflection.cycle_id,
                    ReflectionFailed(
                        cycle_id=reflection.cycle_id,
                        mode=reflection.mode,
                        error=reason,
                        observation_tokens=state.observation_tokens,
                        failed_at=stamp,
                    ),
                )
            )
        if not failures:
            return []
        plan = Plan(state)
        for cycle_id, event in failures:
            plan.add(event, event_id=effect_event_id(stream_id, cycle_id, "outcome"))
        plan_decisions(plan, config_of(deps, state), now, mode="work")
        try:
            commit(deps, plan, metadata={"cause": "stuck-cycle-recovery"})
        except DuplicateEventError:
            # an outcome landed between our read and our append: the cycle is not stuck after all
            return []
        return [cycle_id for cycle_id, _ in failures]

    return retry_on_conflict(attempt)
