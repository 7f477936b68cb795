"""``om simulate``: re-run memory over a recorded thread under another configuration, without touching it.

The recorded messages are read (never written) from the source store and appended, one by one, to a
scratch stream in a separate store, with the context read an agent makes before each model call (after
every user message, and at the end). The scratch record's figures are set against the recorded ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from om_core.application.append import append_messages, configure_thread
from om_core.application.configuration import counter_for, record_config
from om_core.application.context import get_context
from om_core.application.deps import Deps
from om_core.application.ports import EventStore, RecordProjection
from om_core.application.repository import load_state
from om_core.application.streams import RecordNotFoundError, thread_stream_id
from om_core.domain.context import ContextWindow, build_context
from om_core.domain.events import MessageAppended, ThreadConfigured, from_recorded
from om_core.domain.state import RecordState

SCRATCH_TENANT = "simulate"


@dataclass(frozen=True)
class RunFigures:
    messages: int
    events: int
    observer_calls: int
    reflector_calls: int
    buffered_chunks: int
    activations: int
    sync_observations: int
    reflections: int
    generation: int
    unobserved_tokens: int
    observation_tokens: int
    context_tokens: int
    max_context_tokens: int
    compression_ratio: float


@dataclass(frozen=True)
class SimulationReport:
    thread_id: str
    config: dict[str, Any]
    recorded: RunFigures
    simulated: RunFigures

    def as_dict(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "config": self.config,
            "recorded": asdict(self.recorded),
            "simulated": asdict(self.simulated),
        }


def context_tokens(window: ContextWindow, deps_profile: Mapping[str, Any], state: RecordState) -> int:
    counter = counter_for(record_config(deps_profile, state))
    text = [*window.system, window.continuation or ""]
    for message in window.messages:
        for part in message.get("parts", []):
            if isinstance(part, dict) and part.get("type") == "text":
                text.append(str(part.get("text", "")))
    return int(counter.count_text("\n".join(t for t in text if t)))


def _figures(state: RecordState, ctx_tokens: int, max_ctx: int) -> RunFigures:
    s = state.stats
    return RunFigures(
        messages=s.messages,
        events=state.version,
        observer_calls=s.observer_calls,
        reflector_calls=s.reflector_calls,
        buffered_chunks=s.buffered_chunks,
        activations=s.activations,
        sync_observations=s.sync_observations,
        reflections=s.reflections,
        generation=state.generation,
        unobserved_tokens=state.pending_tokens,
        observation_tokens=state.observation_tokens,
        context_tokens=ctx_tokens,
        max_context_tokens=max_ctx,
        compression_ratio=round(s.messages_observed_tokens / max(state.observation_tokens, 1), 2),
    )


def simulate_thread(
    source_records: RecordProjection,
    source: EventStore,
    scratch: Deps,
    *,
    tenant: str,
    thread_id: str,
    config: Mapping[str, Any],
    source_profile: Mapping[str, Any] | None = None,
    drain: Any = None,
) -> SimulationReport:
    """Replay ``thread_id``'s recorded messages into ``scratch`` (a Deps over another store) with
    ``config`` as the thread's configuration, and compare. ``drain`` waits for background work."""
    stream_id = thread_stream_id(tenant, thread_id)
    recorded_events = [from_recorded(r) for r in source.read_stream(stream_id)]
    if not recorded_events:
        raise RecordNotFoundError(stream_id)
    recorded_state = load_state(source_records, source, stream_id)
    recorded_window = build_context(
        recorded_state, record_config(source_profile or {}, recorded_state), scratch.clock()
    )
    recorded_ctx = context_tokens(recorded_window, source_profile or {}, recorded_state)

    resource_id = next(
        (e.resource_id for e in recorded_events if isinstance(e, ThreadConfigured) and e.resource_id), None
    )
    configure_thread(
        scratch, tenant=SCRATCH_TENANT, thread_id=thread_id, resource_id=resource_id, config=dict(config)
    )
    max_ctx = 0
    scratch_stream = thread_stream_id(SCRATCH_TENANT, thread_id)
    for event in recorded_events:
        if not isinstance(event, MessageAppended):
            continue
        append_messages(scratch, tenant=SCRATCH_TENANT, thread_id=thread_id, messages=[event.message])
        if event.role == "user":
            window = get_context(scratch, tenant=SCRATCH_TENANT, thread_id=thread_id)
            state = load_state(scratch.records, scratch.store, scratch_stream)
            max_ctx = max(max_ctx, context_tokens(window, scratch.profile, state))
    if drain is not None:
        drain()
    window = get_context(scratch, tenant=SCRATCH_TENANT, thread_id=thread_id)
    state = load_state(scratch.records, scratch.store, scratch_stream)
    final_ctx = context_tokens(window, scratch.profile, state)
    return SimulationReport(
        thread_id=thread_id,
        config=dict(config),
        recorded=_figures(recorded_state, recorded_ctx, recorded_ctx),
        simulated=_figures(state, final_ctx, max(max_ctx, final_ctx)),
    )
