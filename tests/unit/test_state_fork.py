"""A fork shares its elements with the state it came from, so the fold must never change one in place."""

from __future__ import annotations

from om_core.domain.events import (
    ChunksActivated,
    ObservationBufferRequested,
    ObservationBufferStarted,
    ReflectionCompleted,
    ReflectionRequested,
    ThreadConfigured,
    ValuesExtracted,
)
from om_core.domain.state import RecordState, evolve, fold
from om_core.domain.timeutil import format_time
from tests.unit.test_policy import NOW, _log_state, buffer_chunk, message


def activation(cycle: str, through_seq: int) -> ChunksActivated:
    return ChunksActivated(
        cycle_ids=[cycle],
        through_seq=through_seq,
        message_tokens=100,
        observation_tokens=50,
        triggered_by="threshold",
        activated_at=format_time(NOW),
    )


def busy_state() -> RecordState:
    """A record with a log of two segments, buffered chunks, a run in flight and hints."""
    state = _log_state(10, 60)
    state = fold(state, [message(2, 100), message(3, 100), message(4, 100), message(5, 100)])
    state = buffer_chunk(state, "c1", 2, task="first task")
    state = fold(
        state,
        [activation("c1", 2)],
    )
    state = buffer_chunk(state, "c2", 3)
    return fold(
        state,
        [
            ThreadConfigured(thread_id="t1", metadata={"a": 1}, config={"x": 1}, at=format_time(NOW)),
            ValuesExtracted(cycle_id="c2", values={"k": "v"}, at=format_time(NOW)),
            ObservationBufferRequested(
                cycle_id="c3",
                from_seq=4,
                to_seq=4,
                message_tokens=100,
                pending_tokens=state.pending_tokens,
                trigger="interval",
                requested_at=format_time(NOW),
            ),
        ],
    )


def test_evolving_a_fork_leaves_the_original_as_it_was() -> None:
    original = busy_state()
    before = original.model_dump_json()
    line_count = len(original.log_lines())
    fork = original.fork()
    evolve(
        fork,
        [
            message(6, 100, role="assistant", model="openai/gpt-4o"),
            ObservationBufferStarted(cycle_id="c3", attempt=1, started_at=format_time(NOW)),
            activation("c2", 3),
            ThreadConfigured(thread_id="t1", title="renamed", metadata={"b": 2}, at=format_time(NOW)),
            ValuesExtracted(cycle_id="c3", values={"k": "changed"}, at=format_time(NOW)),
            # reflect part of the log: the rest is carried into a new segment
            ReflectionRequested(
                cycle_id="r1",
                mode="sync",
                generation=0,
                line_count=line_count - 2,
                input_tokens=500,
                target_tokens=250,
                requested_at=format_time(NOW),
            ),
            ReflectionCompleted(
                cycle_id="r1",
                new_generation=1,
                line_count=line_count - 2,
                input_tokens=500,
                text="* condensed",
                tokens=20,
                observation_tokens=200,
                over_target=False,
                completed_at=format_time(NOW),
            ),
        ],
    )
    assert fork.generation == 1 and fork.title == "renamed" and fork.buffer_in_flight is not None
    assert fork.buffer_in_flight.started and fork.stats.activations == original.stats.activations + 1
    assert original.model_dump_json() == before


def test_a_fork_equals_its_original() -> None:
    original = busy_state()
    assert original.fork() == original
    assert original.fork().model_dump_json() == original.model_dump_json()


def test_pending_tokens_follow_every_change_of_the_window() -> None:
    state = busy_state()
    before = state.pending_tokens
    assert before == 24 + sum(m.tokens for m in state.window)
    fork = state.fork()
    evolve(fork, [message(6, 77)])
    assert fork.pending_tokens == before + 77 and state.pending_tokens == before
    # counted on top of what was counted before, in a fork of a fork as in the fork itself
    second = fork.fork()
    evolve(second, [message(7, 5), message(8, 3)])
    assert second.pending_tokens == before + 85 and fork.pending_tokens == before + 77
    evolve(fork, [message(7, 11)])
    assert fork.pending_tokens == before + 88 == 24 + sum(m.tokens for m in fork.window)
    evolve(
        fork,
        [activation("c2", 3)],
    )
    assert fork.pending_tokens == 24 + sum(m.tokens for m in fork.window)
    assert fork == fork.fork(), "equality is over the fields, whatever was memoised"
