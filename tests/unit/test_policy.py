"""Policy and fold, driven purely: events in, decisions out (Mastra 1.31's worked scenarios and our fixes)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from om_core.domain import policy
from om_core.domain.config import parse_memory_config
from om_core.domain.context import build_context, build_status
from om_core.domain.events import (
    ChunksActivated,
    DomainEvent,
    MessageAppended,
    ObservationBufferCompleted,
    ObservationBufferFailed,
    ObservationBufferRequested,
    ReflectionBuffered,
    ReflectionCompleted,
    ReflectionFailed,
    ReflectionRequested,
    SyncObservationCompleted,
    SyncObservationStarted,
)
from om_core.domain.state import InvariantViolation, RecordState, fold, initial_state
from om_core.domain.timeutil import format_time

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def message(
    seq: int,
    tokens: int,
    *,
    role: str = "user",
    at: datetime = NOW,
    model: str | None = None,
    parts: list[dict[str, Any]] | None = None,
) -> MessageAppended:
    return MessageAppended(
        seq=seq,
        message_id=f"m{seq}",
        thread_id="t1",
        role=role,
        created_at=format_time(at),
        model=model,
        tokens=tokens,
        content_hash=f"h{seq}",
        message={
            "id": f"m{seq}",
            "role": role,
            "parts": parts or [{"type": "text", "text": f"msg {seq}"}],
            "createdAt": format_time(at),
        },
        text=f"msg {seq}",
    )


def with_messages(tokens: list[int], **kwargs: Any) -> RecordState:
    return fold(initial_state("ten/thread/t1"), [message(i + 1, t, **kwargs) for i, t in enumerate(tokens)])


def buffer_chunk(
    state: RecordState, cycle: str, to_seq: int, *, obs_tokens: int = 50, task: str | None = None
) -> RecordState:
    from_seq = state.buffered_through_seq + 1
    tokens = sum(m.tokens for m in state.window if from_seq <= m.seq <= to_seq)
    events: list[DomainEvent] = [
        ObservationBufferRequested(
            cycle_id=cycle,
            from_seq=from_seq,
            to_seq=to_seq,
            message_tokens=tokens,
            pending_tokens=state.pending_tokens,
            trigger="interval",
            requested_at=format_time(NOW),
        ),
        ObservationBufferCompleted(
            cycle_id=cycle,
            from_seq=from_seq,
            to_seq=to_seq,
            message_ids=[f"m{i}" for i in range(from_seq, to_seq + 1)],
            message_tokens=tokens,
            observations=f"* 🔴 (12:00) chunk {cycle}",
            observation_tokens=obs_tokens,
            last_observed_at=format_time(NOW),
            current_task=task,
            completed_at=format_time(NOW),
        ),
    ]
    return fold(state, events)


def config(**raw: Any) -> Any:
    return parse_memory_config(raw)


def decide(
    state: RecordState,
    cfg: Any,
    *,
    mode: policy.Mode = "read",
    now: datetime = NOW,
    caller_model: str | None = None,
) -> policy.Decision | None:
    return policy.next_decision(state, cfg, now, mode=mode, caller_model=caller_model)


# --- buffering ------------------------------------------------------------------------------------------


def test_first_buffer_request_at_the_first_interval_multiple() -> None:
    cfg = config(observation={"messageTokens": 30_000})  # B = 6,000
    assert decide(with_messages([5_000]), cfg, mode="append") is None
    d = decide(with_messages([5_000, 1_500]), cfg, mode="append")
    assert isinstance(d, policy.RequestObservationBuffer)
    assert (d.from_seq, d.to_seq) == (1, 2)


def test_buffering_continues_between_threshold_and_block_after() -> None:
    # Mastra stops buffering at T (PR #22078 proposes the band); we buffer until A (docs/semantics.md,
    # Buffering).
    cfg = config(observation={"messageTokens": 10_000, "bufferTokens": 2_000})
    state = with_messages([10_500])  # P = 10,524: over T, under A = 12,000, nothing buffered
    d = decide(state, cfg, mode="append")
    assert isinstance(d, policy.RequestObservationBuffer)


def test_no_buffer_request_while_one_runs_and_none_for_too_little_new_content() -> None:
    cfg = config(observation={"messageTokens": 30_000})
    state = with_messages([6_500])
    state = fold(
        state,
        [
            ObservationBufferRequested(
                cycle_id="c1",
                from_seq=1,
                to_seq=1,
                message_tokens=6_500,
                pending_tokens=6_524,
                trigger="interval",
                requested_at=format_time(NOW),
            )
        ],
    )
    state = fold(state, [message(2, 6_000)])
    assert decide(state, cfg, mode="append") is None  # coalesced: runs never overlap


def test_a_failed_buffer_run_is_not_retried_until_new_messages_arrive() -> None:
    cfg = config(observation={"messageTokens": 30_000})
    state = with_messages([6_500])
    state = fold(
        state,
        [
            ObservationBufferRequested(
                cycle_id="c1",
                from_seq=1,
                to_seq=1,
                message_tokens=6_500,
                pending_tokens=0,
                trigger="interval",
                requested_at=format_time(NOW),
            ),
            ObservationBufferFailed(cycle_id="c1", error="boom", failed_at=format_time(NOW)),
        ],
    )
    assert state.buffer_in_flight is None and state.unbuffered_messages  # offered again, not lost
    assert decide(state, cfg, mode="append") is None
    state = fold(state, [message(2, 6_000)])
    assert isinstance(decide(state, cfg, mode="append"), policy.RequestObservationBuffer)


def test_trailing_pending_tool_call_is_left_out_of_the_chunk() -> None:
    cfg = config(observation={"messageTokens": 30_000})
    call = [{"type": "tool-invocation", "toolCallId": "x", "toolName": "search", "state": "call"}]
    state = fold(with_messages([6_000]), [message(2, 500, role="assistant", parts=call)])
    d = decide(state, cfg, mode="append")
    assert isinstance(d, policy.RequestObservationBuffer)
    assert d.to_seq == 1


# --- activation -----------------------------------------------------------------------------------------


def test_scenario_14_buffer_then_activate_at_threshold() -> None:
    cfg = config(observation={"messageTokens": 500, "bufferTokens": 0.2})
    state = with_messages([100, 100, 100])
    state = buffer_chunk(state, "c1", 3)
    assert decide(state, cfg) is None or not isinstance(decide(state, cfg), policy.ActivateChunks)
    state = fold(state, [message(4, 200)])  # P = 524 >= 500
    d = decide(state, cfg)
    assert isinstance(d, policy.ActivateChunks) and d.triggered_by == "threshold" and d.count == 1
    state = fold(
        state,
        [
            ChunksActivated(
                cycle_ids=["c1"],
                through_seq=3,
                message_tokens=300,
                observation_tokens=50,
                triggered_by="threshold",
                activated_at=format_time(NOW),
            )
        ],
    )
    assert state.chunks == [] and state.observed_seq == 3
    assert [m.seq for m in state.window] == [4]
    assert state.observation_tokens == 50


def test_activation_of_a_non_prefix_is_refused() -> None:
    state = buffer_chunk(buffer_chunk(with_messages([100, 100]), "c1", 1), "c2", 2)
    with pytest.raises(InvariantViolation):
        fold(
            state,
            [
                ChunksActivated(
                    cycle_ids=["c2"],
                    through_seq=2,
                    message_tokens=100,
                    observation_tokens=50,
                    triggered_by="threshold",
                    activated_at=format_time(NOW),
                )
            ],
        )


def test_hints_survive_an_activation_whose_chunk_has_none() -> None:
    state = buffer_chunk(with_messages([100, 100]), "c1", 1, task="plan the trip")
    state = buffer_chunk(state, "c2", 2)
    state = fold(
        state,
        [
            ChunksActivated(
                cycle_ids=["c1", "c2"],
                through_seq=2,
                message_tokens=200,
                observation_tokens=100,
                triggered_by="threshold",
                activated_at=format_time(NOW),
            )
        ],
    )
    assert state.current_task == "plan the trip"


def _ttl_state(last_assistant_ago_ms: int, **cfg_raw: Any) -> tuple[RecordState, Any]:
    cfg = config(observation={"messageTokens": 50_000, "bufferTokens": 5_000}, **cfg_raw)
    state = fold(
        initial_state("ten/thread/t1"),
        [
            message(1, 100),
            message(2, 100, role="assistant", at=NOW - timedelta(milliseconds=last_assistant_ago_ms)),
        ],
    )
    # the user comes back: the chunk of the earlier turn no longer holds the newest user message
    return fold(buffer_chunk(state, "c1", 2), [message(3, 100)]), cfg


def test_scenario_13_idle_ttl_activates_buffered_chunks() -> None:
    state, cfg = _ttl_state(301_000, activateAfterIdle=300_000)
    d = decide(state, cfg)
    assert isinstance(d, policy.ActivateChunks)
    assert d.triggered_by == "ttl" and d.ttl_expired_ms == 301_000
    assert d.last_activity_at == state.last_assistant_at


def test_scenario_13_no_activation_before_the_ttl_or_when_disabled() -> None:
    state, cfg = _ttl_state(60_000, activateAfterIdle=300_000)
    assert decide(state, cfg) is None
    state, cfg = _ttl_state(301_000, activateAfterIdle=300_000)
    off = config(
        observation={"messageTokens": 50_000, "bufferTokens": 5_000, "activateAfterIdle": False},
        activateAfterIdle=300_000,
    )
    assert decide(state, off) is None


def test_scenario_13_trailing_data_part_is_not_activity() -> None:
    cfg = config(observation={"messageTokens": 50_000, "bufferTokens": 5_000}, activateAfterIdle="5m")
    parts = [
        {"type": "text", "text": "hi", "createdAt": format_time(NOW - timedelta(minutes=6))},
        {"type": "data-om-status", "createdAt": format_time(NOW)},
    ]
    state = fold(initial_state("s"), [message(1, 100), message(2, 100, role="assistant", parts=parts)])
    state = fold(buffer_chunk(state, "c1", 2), [message(3, 100)])
    d = decide(state, cfg)
    assert isinstance(d, policy.ActivateChunks) and d.triggered_by == "ttl"


def test_provider_change_wins_over_ttl() -> None:
    state, cfg = _ttl_state(301_000, activateAfterIdle=300_000, activateOnProviderChange=True)
    state = state.model_copy(update={"last_assistant_model": "openai/gpt-5-mini"})
    d = decide(state, cfg, caller_model="anthropic/claude-sonnet-4-5")
    assert isinstance(d, policy.ActivateChunks) and d.triggered_by == "provider_change"
    assert d.previous_model == "openai/gpt-5-mini"
    assert decide(state, cfg, caller_model="openai.responses/gpt-5-mini").triggered_by == "ttl"  # type: ignore[union-attr]


# --- synchronous observation (blockAfter) ---------------------------------------------------------------


def test_below_block_after_a_read_never_observes_while_a_run_can_catch_up() -> None:
    cfg = config(observation={"messageTokens": 10_000, "bufferTokens": 2_000})
    state = with_messages([10_500])
    state = fold(
        state,
        [
            ObservationBufferRequested(
                cycle_id="c1",
                from_seq=1,
                to_seq=1,
                message_tokens=10_500,
                pending_tokens=10_524,
                trigger="interval",
                requested_at=format_time(NOW),
            )
        ],
    )
    assert decide(state, cfg) is None


def test_at_block_after_a_read_observes_synchronously_keeping_a_small_tail() -> None:
    cfg = config(observation={"messageTokens": 10_000, "bufferTokens": 2_000})  # A = 12,000, floor 2,000
    state = with_messages([4_000, 4_000, 3_000, 1_500])  # P = 12,524
    d = decide(state, cfg)
    assert isinstance(d, policy.ObserveSynchronously)
    assert (d.from_seq, d.to_seq) == (1, 3)  # the newest 1,500 tokens stay raw
    assert decide(state, cfg, mode="append") is None or not isinstance(
        decide(state, cfg, mode="append"), policy.ObserveSynchronously
    )


def test_scenario_17_activate_chunks_then_observe_only_the_uncovered_tail() -> None:
    # main #19767 / #25060: 1.31.0 returned after the activation with the tail still over the threshold.
    cfg = config(
        observation={
            "messageTokens": 10_000,
            "bufferTokens": 2_000,
            "bufferActivation": 0.8,
            "blockAfter": 1.2,
        }
    )
    state = with_messages([300, 300])
    state = buffer_chunk(state, "c1", 2, obs_tokens=600)
    state = fold(state, [message(3, 200, role="assistant"), message(4, 30_000, role="tool"), message(5, 100)])
    d = decide(state, cfg)
    assert isinstance(d, policy.ActivateChunks) and d.count == 1
    state = fold(
        state,
        [
            ChunksActivated(
                cycle_ids=["c1"],
                through_seq=2,
                message_tokens=600,
                observation_tokens=600,
                triggered_by="threshold",
                activated_at=format_time(NOW),
            )
        ],
    )
    d = decide(state, cfg)
    assert isinstance(d, policy.ObserveSynchronously)
    assert (d.from_seq, d.to_seq) == (3, 4)


def test_activation_alone_under_the_threshold_needs_no_observer_call() -> None:
    cfg = config(observation={"messageTokens": 10_000, "bufferTokens": 2_000})
    state = buffer_chunk(with_messages([4_000, 4_000]), "c1", 2)
    state = fold(state, [message(3, 2_500)])
    d = decide(state, cfg)
    assert isinstance(d, policy.ActivateChunks)
    state = fold(
        state,
        [
            ChunksActivated(
                cycle_ids=["c1"],
                through_seq=2,
                message_tokens=8_000,
                observation_tokens=50,
                triggered_by="threshold",
                activated_at=format_time(NOW),
            )
        ],
    )
    # what remains is under T: at most a background run is asked for, never a blocking Observer call
    assert not isinstance(decide(state, cfg), policy.ObserveSynchronously)


def test_without_buffering_every_observation_is_synchronous_at_the_threshold() -> None:
    cfg = config(observation={"messageTokens": 500, "bufferTokens": False})
    assert decide(with_messages([50] * 8), cfg) is None
    assert decide(with_messages([50] * 8), cfg, mode="append") is None
    d = decide(with_messages([50] * 20), cfg)
    assert isinstance(d, policy.ObserveSynchronously)


def test_a_single_message_over_the_threshold_stays_raw_while_it_is_the_newest_then_is_observed() -> None:
    # #16523: a first message larger than messageTokens must not sit in a dead zone; but while it is the
    # turn's own question it is what the agent answers, so it is observed once the next turn begins
    cfg = config(observation={"messageTokens": 500, "bufferTokens": False})
    state = with_messages([2_000])
    assert decide(state, cfg) is None
    over = build_status(state, cfg)["overBudget"]
    assert over == {
        "reason": "newest_turn",
        "pendingTokens": 2_024,
        "limitTokens": 500,
        "newestTurnTokens": 2_000,
    }
    state = fold(state, [message(2, 50, role="assistant"), message(3, 10)])
    d = decide(state, cfg)
    assert isinstance(d, policy.ObserveSynchronously) and (d.from_seq, d.to_seq) == (1, 1)


def test_sync_observation_supersedes_a_running_buffer_and_moves_the_cursor() -> None:
    state = with_messages([4_000, 4_000])
    state = fold(
        state,
        [
            ObservationBufferRequested(
                cycle_id="b1",
                from_seq=1,
                to_seq=2,
                message_tokens=8_000,
                pending_tokens=8_024,
                trigger="interval",
                requested_at=format_time(NOW),
            ),
            SyncObservationStarted(
                cycle_id="s1",
                from_seq=1,
                to_seq=2,
                message_tokens=8_000,
                trigger="block_after",
                started_at=format_time(NOW),
            ),
        ],
    )
    assert state.buffer_in_flight is None
    state = fold(
        state,
        [
            SyncObservationCompleted(
                cycle_id="s1",
                from_seq=1,
                to_seq=2,
                message_ids=["m1", "m2"],
                message_tokens=8_000,
                observations="* 🔴 (12:00) x",
                observation_tokens=10,
                last_observed_at=format_time(NOW),
                completed_at=format_time(NOW),
            )
        ],
    )
    assert state.observed_seq == 2 and state.window == [] and state.pending_tokens == 0
    with pytest.raises(InvariantViolation):  # a late buffer outcome for the superseded run cannot apply
        fold(
            state,
            [
                ObservationBufferCompleted(
                    cycle_id="b1",
                    from_seq=1,
                    to_seq=2,
                    message_ids=[],
                    message_tokens=8_000,
                    observations="x",
                    observation_tokens=1,
                    last_observed_at=format_time(NOW),
                    completed_at=format_time(NOW),
                )
            ],
        )


# --- reflection -----------------------------------------------------------------------------------------


def reflection_requested(mode: str, line_count: int, input_tokens: int, target_tokens: int) -> DomainEvent:
    """Cycle ``r1`` asks to reflect the first ``line_count`` lines of generation 0."""
    return ReflectionRequested(
        cycle_id="r1",
        mode=mode,
        generation=0,
        line_count=line_count,
        input_tokens=input_tokens,
        target_tokens=target_tokens,
        requested_at=format_time(NOW),
    )


def _log_state(lines: int, tokens_per_line: int) -> RecordState:
    state = with_messages([100])
    text = "\n".join(f"* 🔴 (12:00) fact {i}" for i in range(lines))
    return fold(
        state,
        [
            SyncObservationStarted(
                cycle_id="s1",
                from_seq=1,
                to_seq=1,
                message_tokens=100,
                trigger="threshold",
                started_at=format_time(NOW),
            ),
            SyncObservationCompleted(
                cycle_id="s1",
                from_seq=1,
                to_seq=1,
                message_ids=["m1"],
                message_tokens=100,
                observations=text,
                observation_tokens=lines * tokens_per_line,
                last_observed_at=format_time(NOW),
                completed_at=format_time(NOW),
            ),
        ],
    )


def test_scenario_27_background_reflection_slice() -> None:
    cfg = config()  # R = 40,000, ratio 0.5
    state = _log_state(400, 60)  # 24,000 tokens
    d = decide(state, cfg, mode="append")
    assert isinstance(d, policy.RequestReflection)
    assert d.mode == "buffered" and d.line_count == 333
    assert d.input_tokens == 19_980 and d.target_tokens == 14_985


def test_scenario_27_between_r_and_block_after_no_sync_without_a_buffer() -> None:
    cfg = config()
    state = _log_state(700, 60)  # 42,000: over R, under 48,000
    d = decide(state, cfg)
    assert isinstance(d, policy.RequestReflection) and d.mode == "buffered"
    state = _log_state(820, 60)  # 49,200 >= 48,000
    d = decide(state, cfg)
    assert isinstance(d, policy.RequestReflection) and d.mode == "sync" and d.line_count == 820


def test_buffered_reflection_activates_keeping_newer_lines_and_chunks() -> None:
    cfg = config()
    state = _log_state(400, 60)
    state = fold(
        state,
        [
            reflection_requested("buffered", 333, 19_980, 14_985),
            ReflectionBuffered(
                cycle_id="r1",
                generation=0,
                line_count=333,
                input_tokens=19_980,
                text="* 🔴 (12:00) condensed",
                tokens=5_000,
                completed_at=format_time(NOW),
            ),
        ],
    )
    state = fold(state, [message(2, 100)])
    state = buffer_chunk(state, "c9", 2)
    state = state.model_copy(update={"observation_tokens": 40_000})
    d = decide(state, cfg)
    assert isinstance(d, policy.ActivateBufferedReflection)
    from om_core.domain.events import ReflectionActivated

    new = fold(
        state,
        [
            ReflectionActivated(
                cycle_id="r1",
                new_generation=1,
                observation_tokens_before=40_000,
                observation_tokens=9_000,
                triggered_by="threshold",
                activated_at=format_time(NOW),
            )
        ],
    )
    lines = new.log_lines()
    assert lines[0] == "* 🔴 (12:00) condensed"
    assert lines[1:] == [f"* 🔴 (12:00) fact {i}" for i in range(333, 400)]
    assert new.generation == 1 and [c.cycle_id for c in new.chunks] == ["c9"]  # chunks carried over


def test_scenario_26_identical_over_threshold_retry_is_suppressed() -> None:
    cfg = config(observation={"bufferTokens": False}, reflection={"observationTokens": 1_000})
    state = _log_state(50, 30)  # 1,500 >= R
    d = decide(state, cfg)
    assert isinstance(d, policy.RequestReflection) and d.mode == "sync"
    state = fold(
        state,
        [
            reflection_requested("sync", 50, 1_500, 1_000),
            ReflectionCompleted(
                cycle_id="r1",
                new_generation=1,
                line_count=50,
                input_tokens=1_500,
                text="short",
                tokens=1_200,
                observation_tokens=1_200,
                over_target=True,
                completed_at=format_time(NOW),
            ),
        ],
    )
    assert state.generation == 1
    assert decide(state, cfg) is None  # same O: suppressed
    bigger = state.model_copy(update={"observation_tokens": 1_201})
    assert isinstance(decide(bigger, cfg), policy.RequestReflection)


def test_a_failed_sync_reflection_is_suppressed_at_the_same_size() -> None:
    cfg = config(observation={"bufferTokens": False}, reflection={"observationTokens": 1_000})
    state = _log_state(50, 30)
    state = fold(
        state,
        [
            reflection_requested("sync", 50, 1_500, 1_000),
            ReflectionFailed(
                cycle_id="r1",
                mode="sync",
                error="empty",
                observation_tokens=1_500,
                failed_at=format_time(NOW),
            ),
        ],
    )
    assert decide(state, cfg) is None


# --- the newest turn stays raw ---------------------------------------------------------------------------


def test_activation_stops_before_a_chunk_holding_the_newest_user_message() -> None:
    cfg = config(observation={"messageTokens": 1_000, "bufferTokens": 200})
    state = with_messages([400, 400])
    state = buffer_chunk(state, "c1", 1)
    state = buffer_chunk(state, "c2", 2)  # holds the newest user message
    state = fold(state, [message(3, 300, role="assistant")])
    d = decide(state, cfg)
    assert isinstance(d, policy.ActivateChunks) and d.count == 1
    assert (
        policy.activation_count(state, policy.resolve_limits(cfg, state), policy.protected_from_seq(state))
        == 1
    )
    # once the user speaks again, the earlier turn's chunk can go
    later = fold(state, [message(4, 10)])
    assert policy.activatable_chunks(later, policy.protected_from_seq(later)) == 2


def test_a_sync_observation_takes_only_what_precedes_the_newest_turn_and_drops_chunks_reaching_into_it() -> (
    None
):
    cfg = config(observation={"messageTokens": 1_000, "bufferTokens": 200, "blockAfter": 1.2})
    state = fold(
        initial_state("ten/thread/t1"),
        [message(1, 300, role="assistant"), message(2, 300), message(3, 900, role="assistant")],
    )
    state = buffer_chunk(state, "c1", 2)  # reaches the newest user message: cannot be activated
    d = decide(state, cfg)
    assert isinstance(d, policy.ObserveSynchronously)
    assert (d.from_seq, d.to_seq) == (1, 1) and d.discarded_chunks == ("c1",)
    started = SyncObservationStarted(
        cycle_id="s1",
        from_seq=1,
        to_seq=1,
        message_tokens=300,
        trigger="block_after",
        started_at=format_time(NOW),
        discarded_chunks=["c1"],
    )
    after = fold(state, [started])
    assert after.chunks == [] and after.buffered_through_seq == 0
    with pytest.raises(InvariantViolation):
        fold(state, [started.model_copy(update={"discarded_chunks": []})])


def test_an_oversized_newest_turn_is_returned_raw_and_said_to_be_over_budget() -> None:
    cfg = config(observation={"messageTokens": 1_000, "bufferTokens": 200, "blockAfter": 1.2})
    state = fold(initial_state("ten/thread/t1"), [message(1, 200, role="assistant"), message(2, 5_000)])
    d = decide(state, cfg)
    assert isinstance(d, policy.ObserveSynchronously) and (d.from_seq, d.to_seq) == (1, 1)
    observed = fold(
        state,
        [
            SyncObservationStarted(
                cycle_id="s1",
                from_seq=1,
                to_seq=1,
                message_tokens=200,
                trigger="block_after",
                started_at=format_time(NOW),
            ),
            SyncObservationCompleted(
                cycle_id="s1",
                from_seq=1,
                to_seq=1,
                message_ids=["m1"],
                message_tokens=200,
                observations="* 🔴 (12:00) something",
                observation_tokens=10,
                last_observed_at=format_time(NOW),
                completed_at=format_time(NOW),
            ),
        ],
    )
    assert decide(observed, cfg) is None
    window = build_context(observed, cfg, NOW, thread_id="t1")
    assert [m["id"] for m in window.messages] == ["m2"]
    assert window.status["overBudget"]["reason"] == "newest_turn"
    assert window.status["overBudget"]["newestTurnTokens"] == 5_000
    assert "stay raw" in window.warnings[0]


def test_in_resource_scope_the_readers_own_newest_user_message_is_kept_too() -> None:
    def in_thread(seq: int, thread: str, role: str = "user") -> DomainEvent:
        return message(seq, 300, role=role).model_copy(update={"thread_id": thread})

    state = fold(
        initial_state("ten/resource/r1"),
        [
            in_thread(1, "a"),
            in_thread(2, "a", "assistant"),
            in_thread(3, "b"),
            in_thread(4, "b", "assistant"),
        ],
    )
    assert policy.protected_from_seq(state) == 3
    assert policy.protected_from_seq(state, "a") == 1
    assert policy.protected_from_seq(state, "b") == 3


# --- bounded reflection -----------------------------------------------------------------------------------


def _generation_one(log_tokens: int) -> RecordState:
    """A record right after a sync reflection that left ``log_tokens`` (R = 1,000, buffering on)."""
    state = _log_state(50, 30)
    return fold(
        state,
        [
            reflection_requested("sync", 50, 1_500, 1_000),
            ReflectionCompleted(
                cycle_id="r1",
                new_generation=1,
                line_count=50,
                input_tokens=1_500,
                text="\n".join(f"* 🔴 (12:00) kept {i}" for i in range(20)),
                tokens=log_tokens,
                observation_tokens=log_tokens,
                over_target=log_tokens >= 1_000,
                completed_at=format_time(NOW),
            ),
        ],
    )


def test_a_reflection_still_over_its_threshold_asks_for_no_other_until_new_observations_arrive() -> None:
    cfg = config(reflection={"observationTokens": 1_000, "blockAfter": 2.0})
    state = _generation_one(1_100)  # over R, below blockAfter, over the buffering start
    assert not state.has_fresh_observations
    assert decide(state, cfg, mode="append") is None
    assert decide(state, cfg, mode="read") is None
    grown = state.model_copy(update={"observation_tokens": 1_150})
    d = decide(grown, cfg, mode="append")
    assert isinstance(d, policy.RequestReflection) and d.mode == "buffered"


def test_at_reflection_block_after_no_small_buffered_reflection_runs_first() -> None:
    cfg = config(reflection={"observationTokens": 1_000, "blockAfter": 1.2})
    state = _log_state(50, 30)  # 1,500 >= 1,200 with nothing buffered
    assert decide(state, cfg, mode="append") is None
    d = decide(state, cfg, mode="read")
    assert isinstance(d, policy.RequestReflection) and d.mode == "sync" and d.line_count == 50


def _buffered_reflection_state(**raw: Any) -> tuple[RecordState, Any]:
    cfg = config(reflection={"observationTokens": 40_000, **raw})
    state = fold(
        _log_state(400, 60),
        [
            reflection_requested("buffered", 100, 6_000, 4_500),
            ReflectionBuffered(
                cycle_id="r1",
                generation=0,
                line_count=100,
                input_tokens=6_000,
                text="* 🔴 (12:00) condensed",
                tokens=3_000,
                completed_at=format_time(NOW),
            ),
            message(2, 100, role="assistant", at=NOW - timedelta(minutes=10), model="openai/gpt-5-mini"),
            message(3, 10),
        ],
    )
    return state, cfg


def test_reflection_activate_after_idle_activates_a_buffered_reflection_below_the_threshold() -> None:
    state, cfg = _buffered_reflection_state(activateAfterIdle="5m")
    d = decide(state, cfg, mode="append")
    assert isinstance(d, policy.ActivateBufferedReflection) and d.triggered_by == "ttl"
    state, cfg = _buffered_reflection_state(activateAfterIdle="1h")
    assert not isinstance(decide(state, cfg, mode="append"), policy.ActivateBufferedReflection)
    state, cfg = _buffered_reflection_state()  # the top-level option is not inherited
    assert not isinstance(decide(state, cfg, mode="append"), policy.ActivateBufferedReflection)


def test_reflection_activate_on_provider_change() -> None:
    state, cfg = _buffered_reflection_state(activateOnProviderChange=True)
    d = decide(state, cfg, mode="append", caller_model="anthropic/claude-sonnet-4-5")
    assert isinstance(d, policy.ActivateBufferedReflection) and d.triggered_by == "provider_change"
    assert not isinstance(
        decide(state, cfg, mode="append", caller_model="openai/gpt-5-mini"), policy.ActivateBufferedReflection
    )


def test_an_early_reflection_activation_is_refused_when_it_would_be_premature() -> None:
    # the lines after the slice (24,000 − 6,000) outweigh the reflection, but the result would be under
    # 0.75·R·(1 − 0.5) = 15,000 with R = 60,000 ... so it waits for the threshold
    state, cfg = _buffered_reflection_state(activateAfterIdle="5m", observationTokens=60_000)
    assert not isinstance(decide(state, cfg, mode="append"), policy.ActivateBufferedReflection)


def test_fold_never_mutates_its_input_and_counts_versions() -> None:
    state = with_messages([10, 20])
    before = state.to_json()
    after = fold(state, [message(3, 30)])
    assert state.to_json() == before
    assert after.version == 3 and after.pending_tokens == 24 + 60


def test_limits_follow_the_config_and_the_log_size_asked_about() -> None:
    """Limits are remembered per config object: asked again for another config, or the same one at
    another log size, they are those of that config at that size."""
    shared = config(
        observation={"messageTokens": 1000, "bufferTokens": False},
        reflection={"observationTokens": 2000},
        shareTokenBudget=True,
    )
    plain = config(
        observation={"messageTokens": 3000, "bufferTokens": 0.1}, reflection={"observationTokens": 500}
    )
    small, large = initial_state("s"), initial_state("s")
    large.observation_tokens = 1500
    for cfg, state in [(shared, small), (plain, small), (shared, large), (shared, small), (plain, large)] * 2:
        assert policy.resolve_limits(cfg, state) == policy._limits(cfg, state.observation_tokens)
    assert policy.resolve_limits(shared, small).message_threshold == 3000
    assert policy.resolve_limits(shared, large).message_threshold == 1500
    assert policy.resolve_limits(plain, large).message_threshold == 3000
