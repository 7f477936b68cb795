"""Use cases that read: get the context window (enforcing blockAfter), replay, status."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from om_core.application.decisions import plan_decisions
from om_core.application.deps import Deps
from om_core.application.ports import ConcurrencyError
from om_core.application.profiles import config_of, record_profile
from om_core.application.repository import load_state, replay_state
from om_core.application.streams import (
    RecordNotFoundError,
    ResourceRequiredError,
    place_thread,
    thread_stream_id,
)
from om_core.application.task_requests import TASK_OBSERVE_SYNC, TASK_REFLECT
from om_core.application.unit_of_work import Plan, commit
from om_core.application.work import WorkOutcome, run_task
from om_core.domain import policy
from om_core.domain.context import UNOBSERVED, ContextWindow, build_context
from om_core.domain.events import ContextReturnedOverBudget, effect_event_id
from om_core.domain.state import RecordState
from om_core.domain.timeutil import format_time

MAX_SYNC_ROUNDS = 8
POLL_INTERVAL_S = 0.02


class ObservationFailedError(RuntimeError):
    """failurePolicy ``abort``: the window is over blockAfter and observing it failed. Nothing is lost."""

    def __init__(
        self, stream_id: str, pending_tokens: int, limit: int, limit_name: str = "blockAfter"
    ) -> None:
        # without buffering the limit a read waits for is messageTokens itself
        super().__init__(
            f"observing {stream_id} failed and its context holds {pending_tokens} unobserved tokens, over "
            f"the {limit_name} limit of {limit}; the messages are kept and the next read tries again"
        )
        self.stream_id = stream_id
        self.pending_tokens = pending_tokens
        self.limit = limit


def get_context(
    deps: Deps,
    *,
    tenant: str,
    thread_id: str,
    caller_model: str | None = None,
    at_version: int | None = None,
    wait: bool = True,
    caller_provider_options: Mapping[str, Any] | None = None,
) -> ContextWindow:
    """The context window to send to the agent's model.

    With ``wait`` (the default) a window over its limit is observed (and an over-size log reflected) before
    the read returns: by a worker when one answers within the bound, else inline. ``wait=False`` never
    blocks: it returns what is there and leaves the work to the background.
    ``at_version`` is time travel: a fresh fold of the first N events, with no side effects.
    """
    return read_context(
        deps,
        tenant=tenant,
        thread_id=thread_id,
        caller_model=caller_model,
        at_version=at_version,
        wait=wait,
        caller_provider_options=caller_provider_options,
    ).window


@dataclass(frozen=True)
class ContextRead:
    window: ContextWindow
    stream_id: str
    # the record as the read found it: what the read itself caused lies between it and the window
    found: RecordState | None


def read_context(
    deps: Deps,
    *,
    tenant: str,
    thread_id: str,
    caller_model: str | None = None,
    at_version: int | None = None,
    wait: bool = True,
    start: RecordState | None = None,
    caller_provider_options: Mapping[str, Any] | None = None,
) -> ContextRead:
    """``get_context``, also returning the state the read started from (None for time travel).

    ``start`` is a state the caller itself just committed (a turn's append): the read begins from it
    instead of reading the record, as if it had come a moment earlier than any later writer. It is only
    read: what the read decides is planned on a copy.
    ``caller_model`` and ``caller_provider_options`` are what the caller sends its own model: an
    ``activateAfterIdle: "auto"`` TTL follows them.
    """
    # a turn's read follows the append that just placed the thread; another read places it from this
    # process's last view of the thread, which reading the thread's own stream verifies below
    trusted = at_version is None and start is None
    try:
        if start is not None:
            stream_id, name = start.stream_id, record_profile(start)
        else:
            placement = place_thread(deps, tenant, thread_id, trust_cache=trusted)
            stream_id, name = placement.stream_id, placement.profile
    except ResourceRequiredError:
        raise RecordNotFoundError(thread_stream_id(tenant, thread_id)) from None
    if at_version is not None:
        state = replay_state(deps.store, stream_id, at_version)
        if state.version == 0:
            raise RecordNotFoundError(stream_id)
        # the profile as it was then: a tenant profile changed later does not rewrite what was decided
        config = config_of(deps, state, at_position=state.position)
        return ContextRead(build_context(state, config, deps.clock(), thread_id=thread_id), stream_id, None)
    state, found = _settle(deps, stream_id, thread_id, caller_model, wait, start, caller_provider_options)
    if trusted and state.stream_id == thread_stream_id(tenant, thread_id) and state.profile != name:
        # placed from a stale view (the thread was created again, or moved, since this process saw it);
        # the read just put the thread's current state in the cache, so placing it again is current
        return read_context(
            deps,
            tenant=tenant,
            thread_id=thread_id,
            caller_model=caller_model,
            wait=wait,
            caller_provider_options=caller_provider_options,
        )
    config = config_of(deps, state)
    window = build_context(state, config, deps.clock(), thread_id=thread_id)
    return ContextRead(_with_calls(_with_warning(window, wait), found, state), stream_id, found)


def _with_calls(window: ContextWindow, found: RecordState, final: RecordState) -> ContextWindow:
    """The status with ``thisRead``: the Observer and Reflector calls recorded while this read ran (its
    own synchronous work, and whatever else committed meanwhile), so a client can see the read's spend."""
    calls = {
        "observerCalls": final.stats.observer_calls - found.stats.observer_calls,
        "reflectorCalls": final.stats.reflector_calls - found.stats.reflector_calls,
    }
    return replace(window, status={**window.status, "thisRead": calls})


def _settle(
    deps: Deps,
    stream_id: str,
    thread_id: str,
    caller_model: str | None,
    wait: bool,
    start: RecordState | None,
    caller_provider_options: Mapping[str, Any] | None = None,
) -> tuple[RecordState, RecordState]:
    """The record once no synchronous work is due, and the record as this read first found it."""
    failed_rounds = 0
    found: RecordState | None = None
    for _ in range(MAX_SYNC_ROUNDS * 4):
        if start is not None and start.stream_id == stream_id:
            state, start, borrowed = start, None, True
        else:
            state, borrowed = load_state(deps.records, deps.store, stream_id, deps.states), False
        if state.version == 0:
            raise RecordNotFoundError(stream_id)
        config = config_of(deps, state)
        now = deps.clock()
        # the first plan keeps a copy of the state it starts from, but only if it commits anything
        capture = (lambda _: True) if found is None else None
        plan = plan_decisions(
            Plan(state, capture_before=capture, borrowed=borrowed),
            config,
            now,
            mode="read" if wait else "work",
            caller_model=caller_model,
            reader_thread=thread_id,
            caller_provider_options=caller_provider_options,
        )
        try:
            commit(deps, plan)
        except ConcurrencyError:
            continue
        if found is None:
            found = plan.prior[1] if plan.prior is not None else plan.state
        state = plan.state
        cycle, task = plan.sync_cycle, plan.sync_task
        if cycle is None and wait:
            cycle, task = _foreign_sync_cycle(state)
        if cycle is None or task is None:
            return state, found
        outcome = _await_cycle(deps, stream_id, cycle, task)
        if outcome == WorkOutcome.FAILED:
            failed_rounds += 1
            state = load_state(deps.records, deps.store, stream_id, deps.states)
            if _over_limit(deps, state):
                return _apply_failure_policy(deps, state), found
        if failed_rounds >= MAX_SYNC_ROUNDS:
            break
    final = load_state(deps.records, deps.store, stream_id, deps.states)
    return final, found or final


def _foreign_sync_cycle(state: RecordState) -> tuple[str | None, str | None]:
    """A synchronous cycle somebody else started: wait for it rather than return an oversize window."""
    if state.sync_in_flight is not None:
        return state.sync_in_flight.cycle_id, TASK_OBSERVE_SYNC
    flight = state.reflection_in_flight
    if flight is not None and flight.mode == "sync":
        return flight.cycle_id, TASK_REFLECT
    return None, None


def _await_cycle(deps: Deps, stream_id: str, cycle_id: str, task: str) -> WorkOutcome:
    """Wait for the cycle's outcome within the bound; if nobody delivers it, run the same task inline.

    A worker that holds the cycle's lease is running it: the read keeps waiting for it, looking again
    every poll, and takes the cycle over once the lease lapses (the worker died). Whoever appends the
    outcome first wins by compare-and-set; the other finds the cycle done.
    """
    deadline = time.monotonic() + deps.sync_wait_seconds
    while True:
        state = load_state(deps.records, deps.store, stream_id, deps.states)
        if state.in_flight(cycle_id) is None:
            return _outcome_of(deps, stream_id, cycle_id)
        if deps.dispatcher.runs_inline or time.monotonic() >= deadline:
            outcome = run_task(deps, task, stream_id, cycle_id)
            if outcome is not WorkOutcome.BUSY:
                break
        time.sleep(POLL_INTERVAL_S)
    if outcome in (WorkOutcome.DUPLICATE, WorkOutcome.STALE):
        return _outcome_of(deps, stream_id, cycle_id)
    return outcome


def _outcome_of(deps: Deps, stream_id: str, cycle_id: str) -> WorkOutcome:
    outcome_id = effect_event_id(stream_id, cycle_id, "outcome")
    recorded = deps.store.find_event(outcome_id)
    if recorded is None:
        return WorkOutcome.STALE
    if recorded.event_type.endswith("Failed"):
        # a cycle taken back from a lost worker: its work is requested again, not failed
        return WorkOutcome.LOST if recorded.data.get("reason") else WorkOutcome.FAILED
    if recorded.event_type.endswith("Stale"):
        return WorkOutcome.STALE
    return WorkOutcome.COMPLETED


def _over_limit(deps: Deps, state: RecordState) -> bool:
    config = config_of(deps, state)
    limits = policy.resolve_limits(config, state)
    limit = limits.block_after if limits.block_after is not None else limits.message_threshold
    return state.pending_tokens >= limit


def _apply_failure_policy(deps: Deps, state: RecordState) -> RecordState:
    config = config_of(deps, state)
    limits = policy.resolve_limits(config, state)
    limit = limits.block_after if limits.block_after is not None else limits.message_threshold
    if config.failure_policy == "abort":
        limit_name = "blockAfter" if limits.block_after is not None else "messageTokens"
        raise ObservationFailedError(state.stream_id, state.pending_tokens, limit, limit_name)
    plan = Plan(state)
    plan.add(
        ContextReturnedOverBudget(
            pending_tokens=state.pending_tokens,
            block_after_tokens=limit,
            reason="synchronous observation failed; failurePolicy is continue",
            at=format_time(deps.clock()),
        )
    )
    try:
        commit(deps, plan)
    except ConcurrencyError:
        return load_state(deps.records, deps.store, state.stream_id, deps.states)
    return plan.state


def _with_warning(window: ContextWindow, waited: bool) -> ContextWindow:
    over = window.status["overBudget"]
    if over is None or over["reason"] != UNOBSERVED:
        return window
    why = "because observation failed (failurePolicy: continue)" if waited else "as the read did not wait"
    return replace(
        window,
        warnings=[
            *window.warnings,
            f"the context holds {over['pendingTokens']} unobserved tokens, over the limit of "
            f"{over['limitTokens']}, {why}",
        ],
    )
