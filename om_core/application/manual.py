"""Manual cycles (``POST /v1/threads/{id}/observe`` and ``/reflect``): observe or reflect now, whatever
the thresholds say, like Mastra's ``observe()``/``reflect()``.

Observation first activates every buffered chunk (their observations are already paid for), then observes
whatever is still unobserved synchronously. Reflection condenses the whole current log into a new
generation. With ``wait`` the call returns once the cycle's outcome is recorded (run by a worker when one
answers within the bound, else inline); without it the work is queued for the background.
"""

from __future__ import annotations

from dataclasses import dataclass

from om_core.application.context import _await_cycle
from om_core.application.decisions import activation_event, new_cycle_id, request_cycle
from om_core.application.deps import Deps
from om_core.application.repository import load_state
from om_core.application.streams import RecordNotFoundError, thread_stream_id
from om_core.application.task_requests import (
    QUEUE_BUFFER,
    QUEUE_SYNC,
    TASK_OBSERVE_SYNC,
    TASK_REFLECT,
)
from om_core.application.unit_of_work import Plan, commit, retry_on_conflict
from om_core.application.work import WorkOutcome
from om_core.domain import policy, thresholds
from om_core.domain.events import ReflectionRequested, SyncObservationStarted
from om_core.domain.state import RecordState
from om_core.domain.timeutil import format_time


@dataclass(frozen=True)
class ManualOutcome:
    """``outcome`` is None when nothing needed doing, ``queued`` when ``wait`` was false."""

    cycle_id: str | None
    outcome: str | None
    version: int
    state: RecordState


def observe_now(deps: Deps, *, tenant: str, thread_id: str, wait: bool = True) -> ManualOutcome:
    stream_id = thread_stream_id(tenant, thread_id)

    def attempt() -> tuple[Plan, int, str | None]:
        state = load_state(deps.records, deps.store, stream_id, deps.states)
        if state.version == 0:
            raise RecordNotFoundError(stream_id)
        if state.sync_in_flight is not None:
            return Plan(state), state.version, state.sync_in_flight.cycle_id
        plan = Plan(state)
        stamp = format_time(deps.clock())
        if state.chunks:
            every_chunk = policy.ActivateChunks(count=len(state.chunks), triggered_by="manual")
            plan.add(activation_event(state, every_chunk, stamp))
        window = plan.state.window
        cycle = None
        if window:
            cycle = new_cycle_id("sync-obs")
            started = SyncObservationStarted(
                cycle_id=cycle,
                from_seq=window[0].seq,
                to_seq=window[-1].seq,
                message_tokens=sum(m.tokens for m in window),
                trigger="manual",
                started_at=stamp,
            )
            request_cycle(plan, started, TASK_OBSERVE_SYNC, _queue(wait))
        version = commit(deps, plan)
        return plan, version, cycle

    plan, version, cycle = retry_on_conflict(attempt)
    return _finish(deps, stream_id, plan, version, cycle, TASK_OBSERVE_SYNC, wait)


def reflect_now(deps: Deps, *, tenant: str, thread_id: str, wait: bool = True) -> ManualOutcome:
    stream_id = thread_stream_id(tenant, thread_id)

    def attempt() -> tuple[Plan, int, str | None]:
        state = load_state(deps.records, deps.store, stream_id, deps.states)
        if state.version == 0:
            raise RecordNotFoundError(stream_id)
        flight = state.reflection_in_flight
        if flight is not None and flight.mode == "sync":
            return Plan(state), state.version, flight.cycle_id
        lines = state.log_lines()
        plan = Plan(state)
        if not state.log or state.observation_tokens == 0 or state.sync_in_flight is not None:
            return plan, state.version, None
        cycle = new_cycle_id("reflect")
        reflection = ReflectionRequested(
            cycle_id=cycle,
            mode="sync",
            generation=state.generation,
            line_count=len(lines),
            input_tokens=state.observation_tokens,
            # a manual reflection condenses: aim below the current size even under the threshold
            target_tokens=max(1, thresholds.reflection_compression_target(state.observation_tokens)),
            requested_at=format_time(deps.clock()),
        )
        request_cycle(plan, reflection, TASK_REFLECT, _queue(wait))
        version = commit(deps, plan)
        return plan, version, cycle

    plan, version, cycle = retry_on_conflict(attempt)
    return _finish(deps, stream_id, plan, version, cycle, TASK_REFLECT, wait)


def _queue(wait: bool) -> str:
    # waited-for work goes to the sync queue (never behind background work); otherwise it is background
    return QUEUE_SYNC if wait else QUEUE_BUFFER


def _finish(
    deps: Deps, stream_id: str, plan: Plan, version: int, cycle: str | None, task: str, wait: bool
) -> ManualOutcome:
    if cycle is None:
        return ManualOutcome(cycle_id=None, outcome=None, version=version, state=plan.state)
    if not wait:
        return ManualOutcome(cycle_id=cycle, outcome="queued", version=version, state=plan.state)
    outcome: WorkOutcome = _await_cycle(deps, stream_id, cycle, task)
    state = load_state(deps.records, deps.store, stream_id, deps.states)
    return ManualOutcome(cycle_id=cycle, outcome=str(outcome), version=state.version, state=state)
