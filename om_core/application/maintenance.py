"""Use cases for periodic maintenance, run by beat: the idle-TTL sweep, taking back the work of lost
workers, and stuck-cycle recovery.

Both work on one record and commit with compare-and-set, so a sweep racing a reader or a task simply loses
and re-reads. Which records to visit is the caller's business (``EventStore.list_streams_with_pending_work``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from om_core.application.decisions import plan_decisions
from om_core.application.deps import Deps
from om_core.application.ports import DuplicateEventError
from om_core.application.profiles import config_of
from om_core.application.repository import load_state
from om_core.application.unit_of_work import Plan, commit, retry_on_conflict
from om_core.domain.events import (
    DomainEvent,
    FailureReason,
    ObservationBufferFailed,
    ReflectionFailed,
    SyncObservationFailed,
    effect_event_id,
)
from om_core.domain.state import BufferInFlight, InFlight, RecordState, SyncInFlight
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

    The last resort for work nobody holds a lease on and nobody runs (a reader that died before its
    synchronous fallback, a task the broker lost and the relay could not publish again): it would otherwise
    keep the record's cycle slot forever. The policy then requests the work again. Returns the cycle ids.
    """

    def stuck(state: RecordState) -> list[InFlight]:
        limit = deps.clock() - older_than
        return [flight for flight, since in _flights(state) if parse_time(since) < limit]

    return _close_cycles(
        deps,
        stream_id,
        stuck,
        reason="timeout",
        error=f"timeout: no outcome within {older_than.total_seconds():.0f}s",
        cause="stuck-cycle-recovery",
    )


def recover_lost_cycles(deps: Deps, *, limit: int = 100) -> list[tuple[str, str]]:
    """Take back the work of holders that stopped renewing their leases: they died (killed, their host
    gone) or lost the database for a whole lease period.

    A cycle still in flight under a lapsed lease is closed as failed, reason ``worker_lost``, under its
    outcome id (a late result of a holder that was only slow is then recorded stale, never applied), and the
    policy requests its work again in the same commit. The lease goes either way. Returns (stream, cycle)
    pairs of the cycles taken back.
    """
    recovered: list[tuple[str, str]] = []
    for lease in deps.leases.lapsed_leases(limit):
        cycle_id = lease.key.removeprefix(f"{lease.stream_id}:")

        def leased(state: RecordState, cycle_id: str = cycle_id) -> list[InFlight]:
            flight = state.in_flight(cycle_id)
            return [] if flight is None else [flight]

        expired = format_time(lease.expires_at)
        closed = _close_cycles(
            deps,
            lease.stream_id,
            leased,
            reason="worker_lost",
            error=f"worker lost: {lease.holder} stopped renewing its lease (expired {expired})",
            cause="lost-worker-recovery",
        )
        if closed:
            recovered.append((lease.stream_id, cycle_id))
            # the cycle's task needs no publishing again: its work is requested anew
            deps.outbox.mark_tasks_completed([lease.key])
        deps.leases.remove_lapsed_lease(lease)
    return recovered


def _flights(state: RecordState) -> list[tuple[InFlight, str]]:
    """The cycles in flight, each with when it was requested (or started)."""
    flights: list[tuple[InFlight, str]] = []
    if state.buffer_in_flight is not None:
        flights.append((state.buffer_in_flight, state.buffer_in_flight.requested_at))
    if state.sync_in_flight is not None:
        flights.append((state.sync_in_flight, state.sync_in_flight.started_at))
    if state.reflection_in_flight is not None:
        flights.append((state.reflection_in_flight, state.reflection_in_flight.requested_at))
    return flights


def _close_cycles(
    deps: Deps,
    stream_id: str,
    select: Callable[[RecordState], list[InFlight]],
    *,
    reason: FailureReason,
    error: str,
    cause: str,
) -> list[str]:
    """Record the cycles ``select`` picks of the record's state as failed for ``reason``, and let the policy
    ask again, in one commit. Returns their ids."""

    def attempt() -> list[str]:
        state = load_state(deps.records, deps.store, stream_id, deps.states)
        if state.version == 0:
            return []
        now = deps.clock()
        stamp = format_time(now)
        failures: list[tuple[str, DomainEvent]] = []
        for flight in select(state):
            event: DomainEvent
            if isinstance(flight, BufferInFlight):
                event = ObservationBufferFailed(
                    cycle_id=flight.cycle_id, error=error, attempts=0, failed_at=stamp, reason=reason
                )
            elif isinstance(flight, SyncInFlight):
                event = SyncObservationFailed(
                    cycle_id=flight.cycle_id, error=error, attempts=0, failed_at=stamp, reason=reason
                )
            else:
                event = ReflectionFailed(
                    cycle_id=flight.cycle_id,
                    mode=flight.mode,
                    error=error,
                    observation_tokens=state.observation_tokens,
                    failed_at=stamp,
                    reason=reason,
                )
            failures.append((flight.cycle_id, event))
        if not failures:
            return []
        plan = Plan(state)
        for cycle_id, event in failures:
            plan.add(event, event_id=effect_event_id(stream_id, cycle_id, "outcome"))
        plan_decisions(plan, config_of(deps, state), now, mode="work")
        try:
            commit(deps, plan, metadata={"cause": cause})
        except DuplicateEventError:
            # an outcome landed between our read and our append: the cycle is not lost after all
            return []
        return [cycle_id for cycle_id, _ in failures]

    return retry_on_conflict(attempt)
