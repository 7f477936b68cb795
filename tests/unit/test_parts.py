"""Domain events → Mastra data-om-* parts, with Mastra's field names (reference §8)."""

from __future__ import annotations

from om_core.domain.config import parse_memory_config
from om_core.domain.events import (
    ChunksActivated,
    MessageAppended,
    ObservationBufferCompleted,
    ObservationBufferFailed,
    ObservationBufferRequested,
    ObservationBufferStale,
    ReflectionActivated,
    ReflectionBuffered,
    ReflectionCompleted,
    ReflectionFailed,
    ReflectionRequested,
    ReflectionStale,
    SyncObservationCompleted,
    SyncObservationStale,
    SyncObservationStarted,
    ThreadConfigured,
    ThreadTitleChanged,
    Usage,
    to_new_event,
)
from om_core.domain.parts import (
    PART_TYPES,
    CycleClosure,
    closure_of_parts,
    cycle_closure,
    erased_parts,
    event_parts,
    parts_for_events,
    status_part,
)
from om_core.domain.state import fold, initial_state
from om_core.domain.usage import cycle_usage

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
    assert set(last_status["data"]) == {
        "windows",
        "recordId",
        "threadId",
        "stepNumber",
        "generationCount",
        "overBudget",
    }


def test_sync_observation_and_reflection_parts() -> None:
    state = fold(initial_state("acme/thread/t"), [ThreadConfigured(thread_id="t", at=T), _message(1)])
    started = SyncObservationStarted(
        cycle_id="sync-obs-1", from_seq=1, to_seq=1, message_tokens=200, trigger="threshold", started_at=T
    )
    (part,) = event_parts(started, state, fold(state, [started]), CONFIG)
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
    (buffering,) = event_parts(request, after, fold(after, [request]), CONFIG)
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


# --- every start is closed exactly once ------------------------------------------------------------------

T1 = "2026-01-01T00:00:01.000Z"
T2 = "2026-01-01T00:00:03.000Z"
START_TYPES = {"data-om-buffering-start", "data-om-observation-start"}
CLOSE_TYPES = {
    "data-om-buffering-end",
    "data-om-buffering-failed",
    "data-om-observation-end",
    "data-om-observation-failed",
}


def _lifecycle(events: list) -> list[tuple[str, str, dict]]:
    """(type, cycleId, data) of every start and closing part, in emission order."""
    flat = [p for _, parts in parts_for_events(initial_state("acme/thread/t"), events, CONFIG) for p in parts]
    return [(p["type"], p["id"], p["data"]) for p in flat if p["type"] in START_TYPES | CLOSE_TYPES]


def _assert_each_start_closed_once(events: list) -> list[tuple[str, str, dict]]:
    lifecycle = _lifecycle(events)
    starts = [cycle for kind, cycle, _ in lifecycle if kind in START_TYPES]
    closes = [cycle for kind, cycle, _ in lifecycle if kind in CLOSE_TYPES]
    assert len(starts) == len(set(starts))
    assert sorted(closes) == sorted(starts), lifecycle
    assert all(data["cycleId"] == cycle for _, cycle, data in lifecycle)
    closure = cycle_closure(events, CONFIG)
    assert closure == CycleClosure(unclosed=[], closed_twice=[], started_twice=[], closed_unstarted=[])
    return lifecycle


def _closing(lifecycle: list[tuple[str, str, dict]], cycle_id: str) -> tuple[str, dict]:
    (found,) = [(kind, data) for kind, cycle, data in lifecycle if cycle == cycle_id and kind in CLOSE_TYPES]
    return found


def _buffer_request(cycle_id: str, from_seq: int, to_seq: int, at: str = T) -> ObservationBufferRequested:
    return ObservationBufferRequested(
        cycle_id=cycle_id,
        from_seq=from_seq,
        to_seq=to_seq,
        message_tokens=200 * (to_seq - from_seq + 1),
        pending_tokens=424,
        trigger="interval",
        requested_at=at,
    )


def _sync_start(cycle_id: str, from_seq: int, to_seq: int, at: str = T1) -> SyncObservationStarted:
    return SyncObservationStarted(
        cycle_id=cycle_id,
        from_seq=from_seq,
        to_seq=to_seq,
        message_tokens=200 * (to_seq - from_seq + 1),
        trigger="threshold",
        started_at=at,
    )


def _sync_done(
    cycle_id: str, from_seq: int, to_seq: int, text: str = "* 🔴 (00:00) a"
) -> SyncObservationCompleted:
    return SyncObservationCompleted(
        cycle_id=cycle_id,
        from_seq=from_seq,
        to_seq=to_seq,
        message_ids=[f"m{seq}" for seq in range(from_seq, to_seq + 1)],
        message_tokens=200 * (to_seq - from_seq + 1),
        observations=text,
        observation_tokens=300,
        last_observed_at=T,
        completed_at=T2,
    )


def _reflection_request(cycle_id: str, mode: str, generation: int = 0, at: str = T) -> ReflectionRequested:
    return ReflectionRequested(
        cycle_id=cycle_id,
        mode=mode,
        generation=generation,
        line_count=1,
        input_tokens=300,
        target_tokens=200,
        requested_at=at,
    )


def _observed_log() -> list:
    """A thread whose log has two lines (one sync observation), nothing in flight."""
    return [
        ThreadConfigured(thread_id="t", at=T),
        _message(1),
        _sync_start("sync-obs-0", 1, 1, at=T),
        _sync_done("sync-obs-0", 1, 1, text="* 🔴 (00:00) a\n* 🔴 (00:01) b"),
    ]


def test_a_completed_buffer_run_is_closed_by_its_end() -> None:
    lifecycle = _assert_each_start_closed_once(_history())
    kind, data = _closing(lifecycle, "buffer-obs-1")
    assert kind == "data-om-buffering-end" and "discarded" not in data


def test_a_failed_buffer_run_is_closed_by_its_failure_and_its_retry_by_its_own_end() -> None:
    events = [
        *_history()[:4],
        ObservationBufferFailed(cycle_id="buffer-obs-1", error="boom", failed_at=T1),
        _message(3),
        # the retry is a new cycle over the same messages
        _buffer_request("buffer-obs-2", 1, 3),
        ObservationBufferFailed(cycle_id="buffer-obs-2", error="boom again", failed_at=T2),
    ]
    lifecycle = _assert_each_start_closed_once(events)
    assert _closing(lifecycle, "buffer-obs-1")[0] == "data-om-buffering-failed"
    assert _closing(lifecycle, "buffer-obs-2")[0] == "data-om-buffering-failed"


def test_a_late_result_of_an_already_closed_cycle_adds_no_second_close() -> None:
    # the stuck-cycle recovery failed the run; the genuine task then finds it gone and records it stale
    events = [
        *_history()[:4],
        ObservationBufferFailed(cycle_id="buffer-obs-1", error="timeout", attempts=0, failed_at=T1),
        ObservationBufferStale(cycle_id="buffer-obs-1", reason="messages were observed meanwhile", at=T2),
    ]
    _assert_each_start_closed_once(events)
    failed = fold(initial_state("acme/thread/t"), events[:-1])
    assert parts_for_events(failed, events[-1:], CONFIG, status_after_each=False) == [(0, [])]


def test_a_buffer_run_overtaken_by_a_sync_observation_is_closed_as_discarded_when_overtaken() -> None:
    events = [
        ThreadConfigured(thread_id="t", at=T),
        _message(1),
        _message(2),
        _buffer_request("buffer-obs-1", 1, 2),
        _sync_start("sync-obs-1", 1, 2),
    ]
    lifecycle = _lifecycle(events)
    # the discarded run is closed before the cycle that took over starts
    assert [(kind, cycle) for kind, cycle, _ in lifecycle] == [
        ("data-om-buffering-start", "buffer-obs-1"),
        ("data-om-buffering-end", "buffer-obs-1"),
        ("data-om-observation-start", "sync-obs-1"),
    ]
    kind, data = _closing(lifecycle, "buffer-obs-1")
    assert kind == "data-om-buffering-end"
    assert data["discarded"] is True and "sync-obs-1" in data["reason"]
    assert data["operationType"] == "observation" and data["completedAt"] == T1
    assert data["tokensBuffered"] == 0 and data["bufferedTokens"] == 0 and data["observations"] == ""
    assert data["extractedValues"] == {} and data["extractionFailures"] == {}
    assert data["durationMs"] == 1000.0 and data["recordId"] == "acme/thread/t" and data["threadId"] == "t"
    # its task may still report back (stale) or never (lost): either way nothing more is emitted for it
    late = ObservationBufferStale(cycle_id="buffer-obs-1", reason="messages were observed meanwhile", at=T2)
    for tail in ([late, _sync_done("sync-obs-1", 1, 2)], [_sync_done("sync-obs-1", 1, 2)]):
        lifecycle = _assert_each_start_closed_once([*events, *tail])
        assert _closing(lifecycle, "sync-obs-1")[0] == "data-om-observation-end"


def test_the_status_after_an_overtaking_sync_observation_shows_no_buffer_running() -> None:
    events = [
        ThreadConfigured(thread_id="t", at=T),
        _message(1),
        _buffer_request("buffer-obs-1", 1, 1),
        _sync_start("sync-obs-1", 1, 1),
    ]
    out = parts_for_events(initial_state("acme/thread/t"), events, CONFIG)
    status = out[-1][1][-1]
    assert status["type"] == "data-om-status"
    assert status["data"]["windows"]["buffered"]["observations"]["status"] == "idle"


def test_a_stale_sync_observation_is_closed_by_a_discarded_observation_end() -> None:
    events = [
        ThreadConfigured(thread_id="t", at=T),
        _message(1),
        _sync_start("sync-obs-1", 1, 1, at=T),
        SyncObservationStale(cycle_id="sync-obs-1", reason="the cycle is no longer in flight", at=T2),
    ]
    lifecycle = _assert_each_start_closed_once(events)
    kind, data = _closing(lifecycle, "sync-obs-1")
    assert kind == "data-om-observation-end" and data["operationType"] == "observation"
    assert data["discarded"] is True and data["reason"] == "the cycle is no longer in flight"
    assert data["tokensObserved"] == 0 and data["observationTokens"] == 0 and data["observations"] == ""
    assert data["currentTask"] is None and data["suggestedResponse"] is None
    assert data["completedAt"] == T2 and data["durationMs"] == 3000.0


def test_a_stale_result_closes_its_cycle_with_what_its_calls_cost() -> None:
    spent = Usage(model="om-local/extractive", input_tokens=900, output_tokens=40, calls=2)
    events = [
        ThreadConfigured(thread_id="t", at=T),
        _message(1),
        _sync_start("sync-obs-1", 1, 1, at=T),
        SyncObservationStale(
            cycle_id="sync-obs-1", reason="the cycle is no longer in flight", usage=spent, at=T2
        ),
    ]
    _, data = _closing(_assert_each_start_closed_once(events), "sync-obs-1")
    assert data["discarded"] is True
    assert data["usage"]["inputTokens"] == 900 and data["usage"]["attempts"] == 2
    # the usage metrics count it too, as a stale cycle
    stored = to_new_event(events[-1])
    found = cycle_usage(stored.event_type, stored.data)
    assert found is not None and (found.operation, found.outcome, found.usage) == (
        "observation",
        "stale",
        spent,
    )
    nothing_called = to_new_event(SyncObservationStale(cycle_id="c", reason="already over", at=T2))
    assert cycle_usage(nothing_called.event_type, nothing_called.data) is None


def test_a_buffered_reflection_superseded_by_a_sync_reflection_is_closed_as_discarded() -> None:
    events = [
        *_observed_log(),
        _reflection_request("reflect-buf-1", "buffered"),
        _reflection_request("reflect-1", "sync", at=T1),
        ReflectionStale(cycle_id="reflect-buf-1", reason="the log changed generation meanwhile", at=T2),
        ReflectionCompleted(
            cycle_id="reflect-1",
            new_generation=1,
            line_count=1,
            input_tokens=300,
            text="* 🔴 ab",
            tokens=100,
            observation_tokens=250,
            over_target=False,
            completed_at=T2,
        ),
    ]
    lifecycle = _assert_each_start_closed_once(events)
    kind, data = _closing(lifecycle, "reflect-buf-1")
    assert kind == "data-om-buffering-end" and data["operationType"] == "reflection"
    assert data["discarded"] is True and "reflect-1" in data["reason"]
    assert data["tokensBuffered"] == 0 and data["bufferedTokens"] == 0 and data["observations"] == ""
    assert _closing(lifecycle, "reflect-1")[0] == "data-om-observation-end"
    order = [(kind, cycle) for kind, cycle, _ in lifecycle][-4:]
    assert order == [
        ("data-om-buffering-start", "reflect-buf-1"),
        ("data-om-buffering-end", "reflect-buf-1"),
        ("data-om-observation-start", "reflect-1"),
        ("data-om-observation-end", "reflect-1"),
    ]


def test_a_reflection_overtaken_by_a_generation_change_is_closed_by_its_stale_result() -> None:
    events = [
        *_observed_log(),
        _reflection_request("reflect-buf-1", "buffered"),
        ReflectionBuffered(
            cycle_id="reflect-buf-1",
            generation=0,
            line_count=1,
            input_tokens=300,
            text="* 🔴 a",
            tokens=50,
            completed_at=T1,
        ),
        _reflection_request("reflect-buf-2", "buffered", at=T1),
        ReflectionActivated(
            cycle_id="reflect-buf-1",
            new_generation=1,
            observation_tokens_before=300,
            observation_tokens=120,
            triggered_by="threshold",
            activated_at=T1,
        ),
        ReflectionStale(cycle_id="reflect-buf-2", reason="the log changed generation meanwhile", at=T2),
    ]
    lifecycle = _assert_each_start_closed_once(events)
    assert _closing(lifecycle, "reflect-buf-1")[0] == "data-om-buffering-end"
    kind, data = _closing(lifecycle, "reflect-buf-2")
    assert kind == "data-om-buffering-end" and data["operationType"] == "reflection"
    assert data["discarded"] is True and data["reason"] == "the log changed generation meanwhile"
    assert data["durationMs"] == 2000.0


def test_a_stale_sync_reflection_is_closed_by_a_discarded_observation_end() -> None:
    events = [
        *_observed_log(),
        _reflection_request("reflect-1", "sync"),
        ReflectionStale(cycle_id="reflect-1", reason="the log changed generation meanwhile", at=T2),
    ]
    lifecycle = _assert_each_start_closed_once(events)
    kind, data = _closing(lifecycle, "reflect-1")
    assert kind == "data-om-observation-end" and data["operationType"] == "reflection"
    assert data["discarded"] is True and data["observationTokens"] == 0


def test_failed_reflections_are_closed_by_their_failures() -> None:
    events = [
        *_observed_log(),
        _reflection_request("reflect-buf-1", "buffered"),
        ReflectionFailed(
            cycle_id="reflect-buf-1", mode="buffered", error="x", observation_tokens=300, failed_at=T1
        ),
        _reflection_request("reflect-1", "sync", at=T1),
        ReflectionFailed(cycle_id="reflect-1", mode="sync", error="y", observation_tokens=300, failed_at=T2),
    ]
    lifecycle = _assert_each_start_closed_once(events)
    assert _closing(lifecycle, "reflect-buf-1")[0] == "data-om-buffering-failed"
    assert _closing(lifecycle, "reflect-1")[0] == "data-om-observation-failed"


def test_the_closure_check_names_cycles_in_flight_and_double_closes() -> None:
    events = [*_history()[:4]]
    assert cycle_closure(events, CONFIG).unclosed == ["buffer-obs-1"]
    start = {"type": "data-om-buffering-start", "id": "c1", "data": {"cycleId": "c1"}}
    end = {"type": "data-om-buffering-end", "id": "c1", "data": {"cycleId": "c1"}}
    orphan = {"type": "data-om-observation-failed", "id": "c2", "data": {"cycleId": "c2"}}
    status = {"type": "data-om-status", "id": "om-status:x", "data": {}}
    assert closure_of_parts([start, end, status, end, start, orphan]) == CycleClosure(
        unclosed=[], closed_twice=["c1"], started_twice=["c1"], closed_unstarted=["c2"]
    )
    assert closure_of_parts([start, end]).ok and not closure_of_parts([start]).ok


def test_erasure_closes_every_cycle_still_in_flight_as_discarded() -> None:
    events = [
        *_observed_log(),
        _message(2),
        _buffer_request("buffer-obs-1", 2, 2),
        _reflection_request("reflect-buf-1", "buffered"),
    ]
    state = fold(initial_state("acme/thread/t"), events)
    closes = erased_parts(state, T2)
    assert [(p["type"], p["id"], p["data"]["operationType"]) for p in closes] == [
        ("data-om-buffering-end", "buffer-obs-1", "observation"),
        ("data-om-buffering-end", "reflect-buf-1", "reflection"),
    ]
    for part in closes:
        data = part["data"]
        assert data["discarded"] is True and data["reason"] == "the thread was erased"
        assert data["tokensBuffered"] == 0 and data["completedAt"] == T2 and data["threadId"] == "t"
    lifecycle = [
        p for _, parts in parts_for_events(initial_state("acme/thread/t"), events, CONFIG) for p in parts
    ]
    assert closure_of_parts([*lifecycle, *closes]).ok
    assert erased_parts(fold(initial_state("acme/thread/t"), _observed_log()), T2) == []
