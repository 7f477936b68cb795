"""The ``data-om-*`` parts of what a request caused, for its answer to carry (the domain's parts module
says what each event stands for; this finds the events and the configuration they are described under)."""

from __future__ import annotations

from om_core.application.append import AppendOutcome
from om_core.application.deps import Deps
from om_core.application.profiles import config_of
from om_core.application.repository import load_state
from om_core.domain.events import from_recorded
from om_core.domain.parts import Part, event_parts, parts_for_events, status_part
from om_core.domain.state import RecordState


def status_of(deps: Deps, state: RecordState, *, thread_id: str | None = None) -> Part:
    """The record's ``data-om-status`` part, as shown to ``thread_id``."""
    return status_part(state, config_of(deps, state), reader_thread=_reader(state, thread_id))


def _reader(state: RecordState, thread_id: str | None) -> str | None:
    """The reading thread, where the record is a resource's (in a thread's own record it changes nothing)."""
    return thread_id if state.thread_id is None else None


def append_parts(
    deps: Deps, outcome: AppendOutcome, *, status: bool = True, thread_id: str | None = None
) -> list[Part]:
    """The lifecycle parts of the events an append committed, then the record's status part, last (unless
    ``status`` is false: a turn's answer ends with its read's status instead).

    Parts that describe an event relative to the state before it (activations, results) start from the
    state the use case kept just before the first such event, so no request replays the stream.
    """
    after = (
        outcome.state
        if outcome.state is not None
        else load_state(deps.records, deps.store, outcome.stream_id, deps.states)
    )
    config = config_of(deps, after)
    events, prior = outcome.events, outcome.prior
    cut = prior[0] if prior is not None else len(events)
    parts = [p for e in events[:cut] for p in event_parts(e, None, after, config)]
    if prior is not None:
        parts.extend(
            p
            for _, batch in parts_for_events(prior[1], events[cut:], config, status_after_each=False)
            for p in batch
        )
    return [*parts, status_part(after, config, reader_thread=_reader(after, thread_id))] if status else parts


def parts_since(deps: Deps, before: RecordState, version: int) -> list[Part]:
    """The lifecycle parts of what was committed to ``before``'s stream after it, up to ``version``,
    folded forward from it."""
    if version <= before.version:
        return []
    recorded = deps.store.read_stream(
        before.stream_id, after_version=before.version, limit=version - before.version
    )
    config = config_of(deps, before)
    events = [from_recorded(r) for r in recorded]
    return [
        p for _, batch in parts_for_events(before, events, config, status_after_each=False) for p in batch
    ]
