"""Domain events → Mastra data-om-* parts, with Mastra's field names (reference §8)."""

from __future__ import annotations

from om_core.domain.config import parse_memory_config
from om_core.domain.events import (
    ChunksActivated,
    MessageAppended,
    ObservationBufferCompleted,
    ObservationBufferFailed,
    ObservationBufferRequested,
    ReflectionActivated,
    ReflectionBuffered,
    ReflectionRequested,
    SyncObservationCompleted,
    SyncObservationStarted,
    ThreadConfigured,
    ThreadTitleChanged,
)
from om_core.domain.parts import PART_TYPES, event_parts, parts_for_events, status_part
from om_core.domain.state import fold, initial_state

CONFIG = parse_memory_config(
    {"observation": {"messageTokens": 1000}, "reflection": {"observationTokens": 800}}
)
T = "2026-01-01T00:00:00.000Z"


def _message(seq: int, tokens: int = 200) -> MessageAppended:
    return MessageAppended(
        seq=seq,
        message_id=f"m{seq}",
        thread_id="t",
        role="user",
        created_at=T,
        tokens=tokens,
        content_hash="h",
        message={"id": f"m{seq}", "role": "user", "parts": [{"type": "text", "text": "x"}]},
        text="x",
    )


def _history() -> list:
    return [
        ThreadConfigured(thread_id="t", at=T),
        _message(1),
        _message(2),
        ObservationBufferRequested(
            cycle_id="buffer-obs-1",
            from_seq=1,
            to_seq=2,
            message_tokens=400,
            pending_tokens=424,
            trigger="interval",
            requested_at=T,
        ),
        ObservationBufferCompleted(
            cycle_id="buffer-obs-1",
            from_seq=1,
            to_seq=2,
            message_ids=["m1", "m2"],
            message_tokens=400,
            observations="* 🔴 (00:00) fact",
            observation_tokens=50,
            last_observed_at=T,
            completed_at="2026-01-01T00:00:02.000Z",
            duration_ms=2000.0,
        ),
        _message(3),
        ChunksActivated(
            cycle_ids=["buffer-obs-1"],
            through_seq=2,
            message_tokens=400,
            observation_tokens=50,
            triggered_by="threshold",
            activated_at=T,
        ),
        ThreadTitleChanged(thread_id="t", old_title=None, new_title="Cooking", cycle_id="buffer-obs-1", at=T),
    ]


def test_every_part_is_framed_with_a_known_type() -> None:
    state = initial_state("acme/thread/t")
    for _, parts in parts_for_events(state, _history(), CONFIG):
        for part in parts:
            assert set(part) == {"type", "id", "data"}
            assert part["type"] in PART_TYPES


def test_buffering_and_activation_fields() -> None:
    state = initial_state("acme/thread/t")
    flat = [p for _, parts in parts_for_events(state, _history(), CONFIG) for p in parts]
    by_type = {}
    for part in flat:
        by_type.setdefault(part["type"], []).append(part)
    start = by_type["data-om-buffering-start"][0]["data"]
    assert start["cycleId"] == "buffer-obs-1" and start["operationType"] == "observation"
    assert (
        start["tokensToBuffer"] == 400
        and start["recordId"] == "acme/thread/t"
        and start["threadIds"] == ["t"]
    )
    assert start["config"] == {"messageTokens": 1000, "observationTokens": 800, "scope": "thread"}
    end = by_type["data-om-buffering-end"][0]["data"]
    assert end["tokensBuffered"] == 400 and end["bufferedTokens"] == 50 and end["durationMs"] == 2000.0
    assert end["observations"].startswith("* 🔴")
    (activation,) = by_type["data-om-activation"]
    data = activation["data"]
    assert activation["id"] == data["cycleId"] == "buffer-obs-1"
    assert data["chunksActivated"] == 1 and data["tokensActivated"] == 400 and data["messagesActivated"] == 2
    assert (
        data["observationTokens"] == 50
        and data["triggeredBy"] == "threshold"
        and data["generationCount"] == 0
    )
    update = by_type["data-om-thread-update"][0]["data"]
    assert update == {
        "cycleId": "buffer-obs-1",
        "threadId": "t",
        "oldTitle": None,
        "newTitle": "Cooking",
        "timestamp": T,
    }


def test_status_follows_state_changes_and_matches_build_status() -> None:
    state = initial_state("acme/thread/t")
    events = _history()
    out = parts_for_events(state, events, CONFIG)
    # ThreadConfigured and ThreadTitleChanged change no token counts: no status after them
    assert [p["type"] for p in out[0][1]] == []
    assert out[1][1][-1]["type"] == "data-om-status"
    final = fold(state, events)
    last_status = [p for _, parts in out for p in parts if p["type"] == "data-om-status"][-1]
    assert last_status == status_part(final, CONFIG)
    windows = last_status["data"]["windows"]
    assert set(windows["active"]) == {"messages", "observations"}
    assert set(windows["buffered"]["observations"]) == {
        "chunks",
        "messageTokens",
        "projectedMessageRemoval",
        "observationTokens",
        "status",
    }
    assert set(last_status["data"]) == {"windows", "recordId", "threadId", "stepNumber", "generationCount"}


def test_sync_observation_and_reflection_parts() -> None:
    state = fold(initial_state("acme/thread/t"), [ThreadConfigured(thread_id="t", at=T), _message(1)])
    started = SyncObservationStarted(
        cycle_id="sync-obs-1", from_seq=1, to_seq=1, message_tokens=200, trigger="threshold", started_at=T
    )
    (part,) = event_parts(started, None, fold(state, [started]), CONFIG)
    assert part["type"] == "data-om-observation-start"
    assert part["data"]["tokensToObserve"] == 200 and part["data"]["operationType"] == "observation"
    done = SyncObservationCompleted(
        cycle_id="sync-obs-1",
        from_seq=1,
        to_seq=1,
        message_ids=["m1"],
        message_tokens=200,
        observations="* 🔴 (00:00) a\n* 🔴 (00:01) b",
        observation_tokens=900,
        last_observed_at=T,
        current_task="cook",
        completed_at=T,
    )
    after = fold(state, [started, done])
    (end,) = event_parts(done, fold(state, [started]), after, CONFIG)
    assert end["type"] == "data-om-observation-end"
    assert end["data"]["tokensObserved"] == 200 and end["data"]["observationTokens"] == 900
    assert end["data"]["currentTask"] == "cook" and end["data"]["suggestedResponse"] is None
    request = ReflectionRequested(
        cycle_id="reflect-buf-1",
        mode="buffered",
        generation=0,
        line_count=1,
        input_tokens=450,
        target_tokens=300,
        requested_at=T,
    )
    (buffering,) = event_parts(request, None, fold(after, [request]), CONFIG)
    assert buffering["type"] == "data-om-buffering-start"
    assert buffering["data"]["operationType"] == "reflection" and buffering["data"]["tokensToBuffer"] == 450
    buffered = ReflectionBuffered(
        cycle_id="reflect-buf-1",
        generation=0,
        line_count=1,
        input_tokens=450,
        text="* 🔴 a",
        tokens=100,
        completed_at=T,
    )
    with_buffer = fold(after, [request, buffered])
    activated = ReflectionActivated(
        cycle_id="reflect-buf-1",
        new_generation=1,
        observation_tokens_before=900,
        observation_tokens=550,
        triggered_by="threshold",
        activated_at=T,
    )
    (activation,) = event_parts(activated, with_buffer, fold(with_buffer, [activated]), CONFIG)
    assert activation["type"] == "data-om-activation"
    assert activation["data"]["operationType"] == "reflection"
    assert activation["data"]["generationCount"] == 1 and activation["data"]["observations"] == "* 🔴 a"


def test_failed_buffer_reports_attempted_tokens() -> None:
    state = fold(initial_state("acme/thread/t"), _history()[:4])
    failed = ObservationBufferFailed(
        cycle_id="buffer-obs-1", error="boom", failed_at="2026-01-01T00:00:01.500Z"
    )
    (part,) = event_parts(failed, state, fold(state, [failed]), CONFIG)
    assert part["type"] == "data-om-buffering-failed"
    assert part["data"]["tokensAttempted"] == 400 and part["data"]["error"] == "boom"
    assert part["data"]["durationMs"] == 1500.0
