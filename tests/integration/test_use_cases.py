"""The application use cases end to end on both backends, with the local model through litellm."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from om_core.application.append import append_messages, configure_thread
from om_core.application.context import ObservationFailedError, get_context
from om_core.application.deps import Deps
from om_core.application.ports import MessageConflictError
from om_core.application.projections import canonical, rebuild_projections, replay_context
from om_core.application.repository import REPLAY_LISTENERS, load_state, replay_state, snapshot_of
from om_core.application.streams import RecordNotFoundError, thread_stream_id
from om_core.bootstrap import build_inline
from om_core.domain.config import ConfigError
from om_core.domain.message_input import MessageValidationError
from testing.postgres import scratch_postgres

PROFILE: dict[str, Any] = {
    "model": "om-local/extractive",
    "observation": {"messageTokens": 600, "bufferTokens": 0.2, "blockAfter": 1.3},
    "reflection": {"observationTokens": 400},
    "modelRetry": {"maxRetries": 0},
}


@pytest.fixture(params=["sqlite", "postgres"])
def deps(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deps]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'om.sqlite3'}"
        built, dispatcher = build_inline(database_url=url, profile=PROFILE)
        yield built
        dispatcher.close()
        return
    with scratch_postgres(prefix="om_test_usecases") as url:
        built, dispatcher = build_inline(database_url=url, profile=PROFILE, migrate=False)
        yield built
        dispatcher.close()


def user(i: int, text: str | None = None) -> dict[str, Any]:
    return {
        "id": f"u{i}",
        "role": "user",
        "content": text or f"My colleague number {i} is called Person{i} and works in Office {i * 7}.",
        "createdAt": f"2026-03-02T10:{i // 60:02d}:{i % 60:02d}Z",
    }


def test_append_counts_tokens_once_and_reports_duplicates(deps: Deps) -> None:
    first = append_messages(deps, tenant="a", thread_id="t", messages=[user(1), user(2)])
    assert [m.message_id for m in first.appended] == ["u1", "u2"]
    assert all(m.tokens > 10 for m in first.appended)
    again = append_messages(deps, tenant="a", thread_id="t", messages=[user(2), user(3)])
    assert again.duplicates == ["u2"] and [m.message_id for m in again.appended] == ["u3"]
    state = load_state(deps.records, deps.store, thread_stream_id("a", "t"))
    assert [m.message_id for m in state.window] == ["u1", "u2", "u3"]


def test_untimed_resend_is_a_duplicate_and_changed_content_a_conflict(deps: Deps) -> None:
    untimed = {"id": "x", "role": "user", "content": "hello there"}
    append_messages(deps, tenant="a", thread_id="t", messages=[untimed])
    assert append_messages(deps, tenant="a", thread_id="t", messages=[untimed]).duplicates == ["x"]
    with pytest.raises(MessageConflictError):
        append_messages(deps, tenant="a", thread_id="t", messages=[{**untimed, "content": "changed"}])
    assert load_state(deps.records, deps.store, thread_stream_id("a", "t")).stats.messages == 1


def test_a_bad_message_rejects_the_whole_request_and_stores_nothing(deps: Deps) -> None:
    append_messages(deps, tenant="a", thread_id="t", messages=[user(1)])
    before = deps.store.stream_version(thread_stream_id("a", "t"))
    with pytest.raises(MessageValidationError) as error:
        append_messages(
            deps, tenant="a", thread_id="t", messages=[user(2), {"role": "wizard", "content": "x"}]
        )
    assert "messages[1]" in str(error.value)
    assert deps.store.stream_version(thread_stream_id("a", "t")) == before


def test_invalid_thread_config_is_rejected_and_nothing_stored(deps: Deps) -> None:
    with pytest.raises(ConfigError) as error:
        configure_thread(deps, tenant="a", thread_id="t", config={"observation": {"bufferActivation": 5}})
    assert "observation.bufferActivation" in str(error.value)
    assert deps.store.stream_version(thread_stream_id("a", "t")) == 0


def test_long_conversation_stays_bounded_and_replays_exactly(deps: Deps) -> None:
    for i in range(60):
        append_messages(deps, tenant="a", thread_id="t", messages=[user(i)])
        window = get_context(deps, tenant="a", thread_id="t")
        assert window.pending_tokens < 780  # blockAfter = 1.3 × 600
    state = load_state(deps.records, deps.store, thread_stream_id("a", "t"))
    assert state.stats.activations >= 1 and state.observation_tokens > 0
    assert canonical(replay_state(deps.store, state.stream_id).to_json()) == canonical(state.to_json())
    report = rebuild_projections(deps.records, deps.store, verify_only=True)
    assert report.mismatched == [] and report.identical >= 1


def test_time_travel_returns_the_context_of_a_fresh_fold(deps: Deps) -> None:
    for i in range(30):
        append_messages(deps, tenant="a", thread_id="t", messages=[user(i)])
        get_context(deps, tenant="a", thread_id="t")
    stream_id = thread_stream_id("a", "t")
    version = deps.store.stream_version(stream_id)
    for at in (1, version // 3, version // 2, version):
        past = get_context(deps, tenant="a", thread_id="t", at_version=at)
        fresh = replay_context(deps.store, stream_id, to_version=at, profile=deps.profile)
        assert past.version == at == fresh["version"]
        assert past.system == fresh["system"] and past.messages == fresh["messages"]
    with pytest.raises(RecordNotFoundError):
        get_context(deps, tenant="a", thread_id="missing")


def _failing(deps: Deps, policy: str) -> None:
    configure_thread(
        deps,
        tenant="a",
        thread_id="t",
        config={"failurePolicy": policy, "observation": {"providerOptions": {"omLocal": {"errorRate": 1.0}}}},
    )


def test_failure_policy_abort_fails_the_read_and_keeps_every_message(deps: Deps) -> None:
    _failing(deps, "abort")
    for i in range(40):
        append_messages(deps, tenant="a", thread_id="t", messages=[user(i)])
    with pytest.raises(ObservationFailedError):
        get_context(deps, tenant="a", thread_id="t")
    state = load_state(deps.records, deps.store, thread_stream_id("a", "t"))
    assert len(state.window) == 40 and state.observed_seq == 0
    configure_thread(deps, tenant="a", thread_id="t", config={})  # the model recovers
    window = get_context(deps, tenant="a", thread_id="t")
    assert window.pending_tokens < 780


def test_failure_policy_continue_returns_the_window_with_a_warning(deps: Deps) -> None:
    _failing(deps, "continue")
    for i in range(40):
        append_messages(deps, tenant="a", thread_id="t", messages=[user(i)])
    window = get_context(deps, tenant="a", thread_id="t")
    assert window.pending_tokens >= 780 and window.warnings
    assert load_state(deps.records, deps.store, thread_stream_id("a", "t")).stats.over_budget_returns == 1


def test_two_writers_on_one_thread_lose_nothing(deps: Deps) -> None:
    errors: list[BaseException] = []

    def writer(offset: int) -> None:
        try:
            for i in range(15):
                append_messages(deps, tenant="a", thread_id="t", messages=[user(offset + i)])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n * 100,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    state = load_state(deps.records, deps.store, thread_stream_id("a", "t"))
    events = deps.store.read_stream(state.stream_id)
    assert [e.stream_version for e in events] == list(range(1, len(events) + 1))
    appended = [e.data["message_id"] for e in events if e.event_type == "MessageAppended"]
    assert sorted(appended) == sorted(f"u{n * 100 + i}" for n in range(2) for i in range(15))
    assert json.dumps(state.to_json())  # the projection is serialisable as stored


def test_a_snapshot_of_an_older_shape_is_rebuilt_from_events(deps: Deps) -> None:
    from om_core.domain.envelope import StateSnapshot

    for i in range(5):
        append_messages(deps, tenant="a", thread_id="t", messages=[user(i)])
    stream_id = thread_stream_id("a", "t")
    expected = load_state(deps.records, deps.store, stream_id)
    old_shape = {**expected.to_json(), "window": [{"seq": 1, "message": {"legacy": True}}]}
    deps.records.replace_snapshot(stream_id, StateSnapshot(old_shape, "a", "t", None), expected.version)
    assert canonical(load_state(deps.records, deps.store, stream_id).to_json()) == canonical(
        expected.to_json()
    )
    assert len(get_context(deps, tenant="a", thread_id="t").messages) == 5


def test_a_process_sees_what_another_process_wrote_through_its_state_cache(deps: Deps) -> None:
    """Two processes on one database, each with its own cache: neither ever reads a stale record."""
    other, dispatcher = build_inline(
        database_url=deps.store.engine.url.render_as_string(False), profile=PROFILE
    )
    try:
        append_messages(deps, tenant="a", thread_id="t", messages=[user(1)])
        assert [
            m.message_id
            for m in load_state(other.records, other.store, thread_stream_id("a", "t"), other.states).window
        ] == ["u1"]
        append_messages(other, tenant="a", thread_id="t", messages=[user(2)])
        mine = load_state(deps.records, deps.store, thread_stream_id("a", "t"), deps.states)
        assert [m.message_id for m in mine.window] == ["u1", "u2"]
        # erased by one process and started again: the other's cached state of the old thread is not used
        assert deps.store.delete_stream(thread_stream_id("a", "t")) > 0
        append_messages(deps, tenant="a", thread_id="t", messages=[user(3)])
        again = load_state(other.records, other.store, thread_stream_id("a", "t"), other.states)
        assert [m.message_id for m in again.window] == ["u3"] and again.stats.messages == 1
    finally:
        dispatcher.close()


def test_a_process_a_few_events_behind_folds_them_onto_the_state_it_holds(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's commits reach this process's cache as the events written since, folded onto the
    state it holds: exactly the record a full read gives, across messages, observations and activations. A
    process further behind reads the record whole."""
    other, dispatcher = build_inline(
        database_url=deps.store.engine.url.render_as_string(False), profile=PROFILE
    )
    stream = thread_stream_id("a", "t")
    ways: list[str] = []
    load_snapshot = deps.records.load_snapshot

    def noted(stream_id: str, **held: Any) -> Any:
        stored = load_snapshot(stream_id, **held)
        if held.get("known_version") is not None and stored is not None:
            ways.append(
                "events" if stored.events is not None else "cached" if stored.state is None else "whole"
            )
        return stored

    monkeypatch.setattr(deps.records, "load_snapshot", noted)
    try:
        seq = 0
        for round_ in range(40):
            # mostly one message from the other process; now and then one of ours, or a long run of theirs
            writer, count = (deps, 1) if round_ % 5 == 4 else (other, 12 if round_ % 13 == 12 else 1)
            for _ in range(count):
                seq += 1
                append_messages(writer, tenant="a", thread_id="t", messages=[user(seq)])
            mine = load_state(deps.records, deps.store, stream, deps.states)
            whole = load_state(deps.records, deps.store, stream)
            assert (mine.version, mine.position) == (whole.version, whole.position)
            assert canonical(mine.to_json()) == canonical(whole.to_json())
            assert mine.window == whole.window
        assert {"events", "whole"} <= set(ways)
        events = deps.store.read_stream(stream)
        assert {"ObservationBufferCompleted", "ChunksActivated"} <= {e.event_type for e in events}
        # and the stream folds from its events to exactly what is stored
        stored = load_state(deps.records, deps.store, stream)
        assert canonical(replay_state(deps.store, stream).to_json()) == canonical(stored.to_json())
    finally:
        dispatcher.close()


def test_a_state_an_append_returned_never_changes_afterwards(deps: Deps) -> None:
    """The cache holds the state a commit produced and lends it to the next append: that append plans on a
    copy, so what an earlier call returned (and a turn's read started from) stays as it was."""
    stream = thread_stream_id("a", "t")
    returned = []
    for i in range(1, 8):
        outcome = append_messages(deps, tenant="a", thread_id="t", messages=[user(i)])
        assert outcome.state is not None and outcome.state.version == outcome.version
        returned.append((outcome.state, canonical(outcome.state.to_json())))
    assert all(canonical(state.to_json()) == when for state, when in returned)
    # each is the stream as of its version
    for state, _ in returned:
        assert state.window == replay_state(deps.store, stream, state.version).window


def test_a_record_read_back_from_its_row_and_message_rows_equals_a_fresh_fold(deps: Deps) -> None:
    """The record row leaves the window's messages out (they are message-projection rows); temporal markers,
    which have no row, stay in it. Read back without a cache, the record is exactly the fold of its events,
    across observations, activations and markers."""
    marked = {**deps.profile, "temporalMarkers": True}
    deps.profile = marked
    stream = thread_stream_id("a", "rows")
    for i in range(1, 40):
        message = user(i)
        # an hour between messages: every user message after the first gets a gap marker before it
        message["createdAt"] = f"2026-03-{2 + i // 24:02d}T{i % 24:02d}:00:00Z"
        append_messages(deps, tenant="a", thread_id="rows", messages=[message])
        get_context(deps, tenant="a", thread_id="rows")
        uncached = load_state(deps.records, deps.store, stream)
        assert canonical(uncached.to_json()) == canonical(replay_state(deps.store, stream).to_json())
    state = load_state(deps.records, deps.store, stream)
    assert state.stats.activations + state.stats.sync_observations >= 1, "messages were observed meanwhile"
    assert state.log, "observations reached the log"
    assert state.generation >= 1, "a reflection replaced the log meanwhile"
    # the row holds this log: the next write leaves it out; a change of the log puts it in again
    assert snapshot_of(state, "a").log is None
    assert snapshot_of(load_state(deps.records, deps.store, stream, deps.states), "a").log is None
    assert snapshot_of(replay_state(deps.store, stream), "a").log is not None
    assert any(m.kind == "marker" for m in state.window) and any(m.kind == "message" for m in state.window)
    stored = deps.records.load_snapshot(stream)
    assert stored is not None and stored.state is not None
    kinds = {m["kind"] for m in json.loads(stored.state)["window"]}
    assert kinds == {"marker"}
    assert (
        rebuild_projections(deps.records, deps.store, verify_only=True, prefix="a/thread/rows").mismatched
        == []
    )


def test_a_message_row_missing_from_the_window_falls_back_to_the_events_and_verify_flags_it(
    deps: Deps,
) -> None:
    import sqlalchemy as sa

    from testing.store import engine_of

    stream = thread_stream_id("a", "gap")
    append_messages(deps, tenant="a", thread_id="gap", messages=[user(1), user(2), user(3)])
    with engine_of(deps).begin() as conn:
        conn.execute(
            sa.text("DELETE FROM om_messages WHERE stream_id = :s AND message_id = 'u2'"), {"s": stream}
        )
    read_back = load_state(deps.records, deps.store, stream)
    assert [m.message_id for m in read_back.window] == ["u1", "u2", "u3"]
    assert rebuild_projections(
        deps.records, deps.store, verify_only=True, prefix="a/thread/gap"
    ).mismatched == [stream]


def test_a_reader_beside_a_writer_never_folds_the_stream(deps: Deps) -> None:
    """The row and the window's messages come from one snapshot: an append committed between two reads
    can never make them disagree and force a fold of the whole stream."""
    stream = thread_stream_id("a", "busy")
    append_messages(deps, tenant="a", thread_id="busy", messages=[user(0)])
    replays: list[str] = []
    REPLAY_LISTENERS.append(lambda stream_id, reason: replays.append(reason))
    done = threading.Event()
    reads = 0

    def write() -> None:
        try:
            for i in range(1, 40):
                append_messages(deps, tenant="a", thread_id="busy", messages=[user(i)])
        finally:
            done.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        while not done.is_set():
            # no cache: every read takes the row and its window from the database
            state = load_state(deps.records, deps.store, stream)
            seqs = [m.seq for m in state.window]
            assert seqs == list(range(state.observed_seq + 1, state.next_seq))
            reads += 1
            time.sleep(0.002)
    finally:
        writer.join()
        REPLAY_LISTENERS.clear()
    assert reads > 10
    assert replays == []
