"""Turning the policy's decisions into events and task requests."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from om_core.application.configuration import counter_for
from om_core.application.task_requests import (
    QUEUE_BUFFER,
    QUEUE_SYNC,
    TASK_OBSERVE_BUFFER,
    TASK_OBSERVE_SYNC,
    TASK_REFLECT,
    task_request,
)
from om_core.application.unit_of_work import Plan
from om_core.domain import policy
from om_core.domain.config import MemoryConfig
from om_core.domain.events import (
    ChunksActivated,
    ObservationBufferRequested,
    ReflectionActivated,
    ReflectionRequested,
    SyncObservationStarted,
    effect_event_id,
)
from om_core.domain.state import RecordState
from om_core.domain.timeutil import format_time


def new_cycle_id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:16]}"


def request_event_id(stream_id: str, cycle_id: str) -> uuid.UUID:
    """The id of the event that started a cycle: a task finds it only in the lineage that requested it,
    which is how work for an erased (and perhaps re-created) stream knows to do nothing."""
    return effect_event_id(stream_id, cycle_id, "requested")


def request_cycle(
    plan: Plan,
    event: ObservationBufferRequested | SyncObservationStarted | ReflectionRequested,
    task: str,
    queue: str,
) -> None:
    """Add the event that starts a cycle, under the id its task looks for, and the request for that task."""
    stream_id = plan.state.stream_id
    plan.add(event, event_id=request_event_id(stream_id, event.cycle_id))
    plan.tasks.append(task_request(stream_id, event.cycle_id, task, queue))


def activation_event(state: RecordState, decision: policy.ActivateChunks, at: str) -> ChunksActivated:
    """The event that moves the first ``decision.count`` buffered chunks of ``state`` into the log."""
    chunks = state.chunks[: decision.count]
    return ChunksActivated(
        cycle_ids=[c.cycle_id for c in chunks],
        through_seq=chunks[-1].to_seq,
        message_tokens=sum(c.message_tokens for c in chunks),
        observation_tokens=sum(c.observation_tokens for c in chunks),
        triggered_by=decision.triggered_by,
        activated_at=at,
        last_activity_at=decision.last_activity_at,
        ttl_expired_ms=decision.ttl_expired_ms,
        previous_model=decision.previous_model,
        current_model=decision.current_model,
    )


def plan_decisions(
    plan: Plan,
    config: MemoryConfig,
    now: datetime,
    *,
    mode: policy.Mode,
    caller_model: str | None = None,
    reader_thread: str | None = None,
    caller_provider_options: Mapping[str, Any] | None = None,
) -> Plan:
    """Turn policy decisions into events until the policy is satisfied or needs a model synchronously."""
    counter = counter_for(config)
    stamp = format_time(now)
    while plan.sync_cycle is None:
        decision = policy.next_decision(
            plan.state,
            config,
            now,
            mode=mode,
            caller_model=caller_model,
            reader_thread=reader_thread,
            caller_provider_options=caller_provider_options,
        )
        if decision is None:
            break
        state = plan.state
        if isinstance(decision, policy.ActivateChunks):
            plan.add(activation_event(state, decision, stamp))
        elif isinstance(decision, policy.RequestObservationBuffer):
            requested = ObservationBufferRequested(
                cycle_id=new_cycle_id("buffer-obs"),
                from_seq=decision.from_seq,
                to_seq=decision.to_seq,
                message_tokens=decision.message_tokens,
                pending_tokens=decision.pending_tokens,
                trigger=decision.trigger,
                requested_at=stamp,
            )
            request_cycle(plan, requested, TASK_OBSERVE_BUFFER, QUEUE_BUFFER)
        elif isinstance(decision, policy.ObserveSynchronously):
            started = SyncObservationStarted(
                cycle_id=new_cycle_id("sync-obs"),
                from_seq=decision.from_seq,
                to_seq=decision.to_seq,
                message_tokens=decision.message_tokens,
                trigger=decision.trigger,
                started_at=stamp,
                discarded_chunks=list(decision.discarded_chunks),
            )
            request_cycle(plan, started, TASK_OBSERVE_SYNC, QUEUE_SYNC)
            plan.sync_cycle, plan.sync_task = started.cycle_id, TASK_OBSERVE_SYNC
        elif isinstance(decision, policy.RequestReflection):
            reflection = ReflectionRequested(
                cycle_id=new_cycle_id("reflect-buf" if decision.mode == "buffered" else "reflect"),
                mode=decision.mode,
                generation=state.generation,
                line_count=decision.line_count,
                input_tokens=decision.input_tokens,
                target_tokens=decision.target_tokens,
                requested_at=stamp,
            )
            queue = QUEUE_SYNC if decision.mode == "sync" else QUEUE_BUFFER
            request_cycle(plan, reflection, TASK_REFLECT, queue)
            if decision.mode == "sync":
                plan.sync_cycle, plan.sync_task = reflection.cycle_id, TASK_REFLECT
        else:
            buffered = state.buffered_reflection
            assert buffered is not None  # the policy only activates an existing buffered reflection
            carried = "\n".join(state.log_lines()[buffered.line_count :])
            total = buffered.tokens + (counter.count_text(carried) if carried.strip() else 0)
            plan.add(
                ReflectionActivated(
                    cycle_id=buffered.cycle_id,
                    new_generation=state.generation + 1,
                    observation_tokens_before=state.observation_tokens,
                    observation_tokens=total,
                    triggered_by=decision.triggered_by,
                    activated_at=stamp,
                )
            )
    return plan
