"""The event store contract, run against SQLite and Postgres alike.

``EventStoreContract`` holds every behaviour; the two subclasses only say how to get a migrated database.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from om_core.adapters.store import SqlEventStore, create_event_store
from om_core.adapters.store.migrations import upgrade_to_head
from om_core.adapters.store.schema import events as events_table
from om_core.adapters.store.schema import outbox as outbox_table
from om_core.application.ports import (
    CATCH_UP_EVENTS,
    ConcurrencyError,
    DuplicateEventError,
    DuplicateMessageError,
    MessageConflictError,
    StoreUnavailableError,
)
from om_core.domain.envelope import IndexedGroup, NewEvent, RecordedEvent, StateSnapshot, TaskRequest
from om_core.domain.upcasting import Upcasters


def new_stream(kind: str = "thread") -> str:
    return f"acme/{kind}/{uuid.uuid4().hex}"


def event(n: int = 0, event_type: str = "Noted", **data: Any) -> NewEvent:
    return NewEvent(event_type, {"n": n, **data}, metadata={"tenant": "acme", "trace_id": f"t{n}"})


def message_event(
    message_id: str,
    *,
    seq: int = 1,
    content_hash: str | None = None,
    thread_id: str | None = "th-1",
    created_at: str = "2025-01-02T03:04:05.678Z",
    text: str = "hello there",
) -> NewEvent:
    return NewEvent(
        "MessageAppended",
        {
            "seq": seq,
            "message_id": message_id,
            "thread_id": thread_id,
            "resource_id": None,
            "role": "user",
            "created_at": created_at,
            "model": None,
            "tokens": 3,
            "content_hash": content_hash or f"hash-of-{message_id}",
            "message": {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]},
            "text": text,
        },
    )


def snapshot(pending_work: bool = False, log: str | None = None, **state: Any) -> StateSnapshot:
    return StateSnapshot(
        state=state or {"k": 1},
        tenant="acme",
        thread_id="th-1",
        resource_id="res-1",
        pending_work=pending_work,
        log=log,
    )


def stored_state(store: SqlEventStore, stream: str) -> tuple[dict[str, Any], int] | None:
    """The stored projection as (document, version)."""
    loaded = store.load_snapshot(stream)
    if loaded is None:
        return None
    assert loaded.state is not None
    return json.loads(loaded.state), loaded.version


def indexed(
    stream: str,
    group_id: str,
    *,
    resource: str | None = None,
    text: str | None = None,
    embedding: list[float] | None = None,
    observed_at: str = "2026-03-02T10:00:00.000Z",
) -> IndexedGroup:
    return IndexedGroup(
        stream_id=stream,
        group_id=group_id,
        tenant=stream.split("/", 1)[0],
        thread_id=stream.rsplit("/", 1)[-1],
        resource_id=resource,
        range_start="m1",
        range_end="m3",
        text=text or f"text of {group_id}",
        observed_at=observed_at,
        model="om-local/hashing",
        embedding=embedding or [0.0, 1.0],
    )


def task(key: str) -> TaskRequest:
    return TaskRequest(key=key, task_name="om.observe", queue="om.buffer", payload={"cycle_id": key})


def read_everything(store: SqlEventStore) -> list[RecordedEvent]:
    found: list[RecordedEvent] = []
    cursor = 0
    while page := store.read_all(cursor, limit=500):
        found.extend(page)
        cursor = page[-1].global_position
    return found


def source_event(store: SqlEventStore, stream: str) -> uuid.UUID:
    """Append an event to ``stream`` and return its id: what indexed groups are written from."""
    written = event(1)
    store.append(stream, [written], store.stream_version(stream))
    return written.event_id


def transactional(store: SqlEventStore) -> sa.Engine:
    """The store's engine runs in autocommit on Postgres; tests that hold transactions open need this."""
    return store.engine.execution_options(isolation_level="READ COMMITTED")


class EventStoreContract:
    """Every behaviour of the event store. Subclasses provide a ``store`` fixture on a migrated database."""

    postgres = False

    def outbox_rows(self, store: SqlEventStore, stream_id: str) -> list[Any]:
        with store.engine.connect() as conn:
            return list(conn.execute(sa.select(outbox_table).where(outbox_table.c.stream_id == stream_id)))

    # --- appending -------------------------------------------------------------------------------------

    def test_append_to_a_new_stream_starts_at_version_one(self, store: SqlEventStore) -> None:
        stream = new_stream()
        batch = [event(1), event(2), event(3)]
        result = store.append(stream, batch, 0)

        assert (result.stream_id, result.first_version, result.last_version) == (stream, 1, 3)
        assert list(result.global_positions) == sorted(result.global_positions)
        assert store.stream_version(stream) == 3
        recorded = store.read_stream(stream)
        assert [r.stream_version for r in recorded] == [1, 2, 3]
        assert [r.global_position for r in recorded] == list(result.global_positions)
        assert [r.event_id for r in recorded] == [e.event_id for e in batch]
        assert [r.data for r in recorded] == [e.data for e in batch]
        assert [r.metadata for r in recorded] == [e.metadata for e in batch]
        assert all(r.event_type == "Noted" and r.schema_version == 1 for r in recorded)
        for r in recorded:
            assert r.recorded_at.tzinfo is not None and r.recorded_at.utcoffset() == timedelta(0)
            assert abs(r.recorded_at - datetime.now(UTC)) < timedelta(minutes=5)

    def test_unknown_stream_is_at_version_zero(self, store: SqlEventStore) -> None:
        stream = new_stream()
        assert store.stream_version(stream) == 0
        assert store.read_stream(stream) == []
        assert store.load_snapshot(stream) is None

    def test_stale_expected_version_is_a_conflict_with_the_actual_version(self, store: SqlEventStore) -> None:
        stream = new_stream()
        store.append(stream, [event(1), event(2)], 0)
        for stale in (0, 1):
            with pytest.raises(ConcurrencyError) as raised:
                store.append(stream, [event(3)], stale)
            assert (raised.value.stream_id, raised.value.expected_version) == (stream, stale)
            assert raised.value.actual_version == 2
        store.append(stream, [event(3)], 2)
        assert store.stream_version(stream) == 3

    def test_expected_version_beyond_the_stream_is_a_conflict(self, store: SqlEventStore) -> None:
        stream = new_stream()
        with pytest.raises(ConcurrencyError) as on_empty:
            store.append(stream, [event(1)], 1)
        assert on_empty.value.actual_version == 0
        store.append(stream, [event(1), event(2), event(3)], 0)
        with pytest.raises(ConcurrencyError) as gap:
            store.append(stream, [event(6)], 5)
        assert gap.value.actual_version == 3
        assert store.stream_version(stream) == 3

    def test_a_failed_append_writes_nothing(self, store: SqlEventStore) -> None:
        stream = new_stream()
        store.append(stream, [event(1)], 0, snapshot=snapshot(v=1), tasks=[task(f"{stream}/a")])
        before = (
            store.read_stream(stream),
            stored_state(store, stream),
            store.find_messages(stream, ["m-new"]),
            len(self.outbox_rows(store, stream)),
        )

        with pytest.raises(ConcurrencyError):
            store.append(
                stream,
                [event(2), message_event("m-new")],
                0,
                snapshot=snapshot(v=2),
                tasks=[task(f"{stream}/b")],
            )

        after = (
            store.read_stream(stream),
            stored_state(store, stream),
            store.find_messages(stream, ["m-new"]),
            len(self.outbox_rows(store, stream)),
        )
        assert after == before
        assert before[1] == ({"v": 1}, 1) and before[2] == {} and before[3] == 1

    def test_an_event_id_stored_before_is_a_duplicate_and_nothing_is_written(
        self, store: SqlEventStore
    ) -> None:
        first, second = new_stream(), new_stream()
        already = event(1)
        store.append(first, [already], 0)

        with pytest.raises(DuplicateEventError) as raised:
            store.append(
                second,
                [event(0), already, message_event("m1")],
                0,
                snapshot=snapshot(),
                tasks=[task(f"{second}/t")],
            )

        assert raised.value.event_ids == [str(already.event_id)]
        assert store.stream_version(second) == 0
        assert store.load_snapshot(second) is None
        assert store.find_messages(second, ["m1"]) == {}
        assert self.outbox_rows(store, second) == []

    def test_retrying_an_append_that_already_committed_reports_the_duplicate(
        self, store: SqlEventStore
    ) -> None:
        stream = new_stream()
        batch = [event(1), event(2)]
        store.append(stream, batch, 0)
        with pytest.raises(DuplicateEventError):
            store.append(stream, batch, 0)

    def test_invalid_appends_are_refused_before_touching_the_database(self, store: SqlEventStore) -> None:
        stream = new_stream()
        twice = event(1)
        with pytest.raises(ValueError):
            store.append(stream, [], 0)
        with pytest.raises(ValueError):
            store.append(stream, [event(1)], -1)
        with pytest.raises(ValueError):
            store.append(stream, [twice, twice], 0)
        with pytest.raises(ValueError):
            store.append(stream, [NewEvent("MessageAppended", {"message_id": "m"})], 0)
        assert store.stream_version(stream) == 0

    # --- messages as idempotency keys ------------------------------------------------------------------

    def test_message_projection_rows_are_written_with_the_events(self, store: SqlEventStore) -> None:
        stream = new_stream()
        result = store.append(
            stream,
            [event(1), message_event("m1", seq=1), message_event("m2", seq=2, thread_id="th-2")],
            0,
            snapshot=snapshot(),
        )
        found = store.find_messages(stream, ["m1", "m2", "m3"])
        assert set(found) == {"m1", "m2"}
        assert (found["m1"].content_hash, found["m1"].stream_version) == ("hash-of-m1", 2)
        assert found["m2"].stream_version == 3
        assert result.last_version == 3

        [row] = store.read_messages(stream, thread_id="th-2")
        assert (row.message_id, row.seq, row.role, row.tokens, row.thread_id) == ("m2", 2, "user", 3, "th-2")
        assert row.resource_id == "res-1"  # from the snapshot when the message names none
        assert row.created_at == datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
        assert row.message["parts"][0]["text"] == "hello there"

    def test_same_message_id_and_content_is_reported_duplicate(self, store: SqlEventStore) -> None:
        stream = new_stream()
        store.append(stream, [message_event("m1")], 0)
        with pytest.raises(DuplicateMessageError) as raised:
            store.append(stream, [event(2), message_event("m1")], 1, snapshot=snapshot())
        assert raised.value.message_ids == ["m1"]
        assert store.stream_version(stream) == 1
        assert store.load_snapshot(stream) is None

    def test_same_message_id_with_other_content_is_a_conflict(self, store: SqlEventStore) -> None:
        stream = new_stream()
        store.append(stream, [message_event("m1")], 0)
        with pytest.raises(MessageConflictError) as raised:
            store.append(stream, [message_event("m1", content_hash="other")], 1, tasks=[task(f"{stream}/x")])
        assert (raised.value.stream_id, raised.value.message_id) == (stream, "m1")
        assert store.stream_version(stream) == 1
        assert self.outbox_rows(store, stream) == []

    def test_message_ids_repeated_within_one_append(self, store: SqlEventStore) -> None:
        stream = new_stream()
        with pytest.raises(DuplicateMessageError):
            store.append(stream, [message_event("m1"), message_event("m1")], 0)
        with pytest.raises(MessageConflictError):
            store.append(stream, [message_event("m1"), message_event("m1", content_hash="other")], 0)
        assert store.stream_version(stream) == 0

    def test_message_ids_are_scoped_to_their_stream(self, store: SqlEventStore) -> None:
        first, second = new_stream(), new_stream()
        store.append(first, [message_event("m1")], 0)
        store.append(second, [message_event("m1", content_hash="other")], 0)
        assert store.find_messages(second, ["m1"])["m1"].content_hash == "other"

    def test_read_messages_pages_in_stream_order_both_ways(self, store: SqlEventStore) -> None:
        stream = new_stream("resource")
        start = datetime(2025, 3, 1, tzinfo=UTC)
        # ids that do not sort as they were sent, several sharing a moment, one dated back: seq decides
        names = ["m8", "m10", "m9", "a1", "z0", "m2", "b7", "m11", "c3", "m1"]
        batch = [
            message_event(
                name,
                seq=i + 1,
                thread_id="a" if i % 2 else "b",
                created_at=(
                    start - timedelta(days=1) if i == 5 else start + timedelta(minutes=i // 3)
                ).isoformat(),
            )
            for i, name in enumerate(names)
        ]
        store.append(stream, batch, 0)
        assert [m.message_id for m in store.read_messages(stream, limit=100)] == names

        first = store.read_messages(stream, limit=4)
        second = store.read_messages(stream, cursor=first[-1].seq, limit=4)
        assert [m.message_id for m in first + second] == names[:8]

        latest = store.read_messages(stream, backward=True, limit=3)
        assert [m.message_id for m in latest] == names[-3:]
        before = store.read_messages(stream, cursor=latest[0].seq, backward=True, limit=3)
        assert [m.message_id for m in before] == names[4:7]
        assert [m.message_id for m in store.read_messages(stream, thread_id="b")] == names[0::2]
        assert [m.message_id for m in store.read_messages(stream, thread_id="a", cursor=4, limit=2)] == [
            "m2",
            "m11",
        ]

    def test_a_message_id_is_looked_up_in_the_streams_named_only(self, store: SqlEventStore) -> None:
        first, second, elsewhere = new_stream(), new_stream(), new_stream()
        store.append(first, [message_event("m1", text="first")], 0)
        store.append(second, [message_event("m1", content_hash="other", text="second")], 0)
        store.append(elsewhere, [message_event("m1", content_hash="third")], 0)
        found = store.messages_with_id([first, second], "m1")
        assert sorted(m.stream_id for m in found) == sorted([first, second])
        assert [m.message["parts"][0]["text"] for m in store.messages_with_id([second], "m1")] == ["second"]
        assert store.messages_with_id([first], "m2") == []
        assert store.messages_with_id([], "m1") == []

    def test_search_narrows_to_streams_and_threads(self, store: SqlEventStore) -> None:
        stream = new_stream("resource")
        word = f"kumquat{uuid.uuid4().hex[:8]}"
        store.append(
            stream,
            [
                message_event("m1", seq=1, thread_id="a", text=f"the {word} tree"),
                message_event("m2", seq=2, thread_id="b", text=f"a {word} jam"),
            ],
            0,
        )
        both = store.search_messages("acme", word, stream_ids=[stream])
        assert sorted(h.message.message_id for h in both) == ["m1", "m2"]
        only_b = store.search_messages("acme", word, stream_ids=[stream], thread_ids=["b"])
        assert [h.message.message_id for h in only_b] == ["m2"]
        assert store.search_messages("acme", word, stream_ids=[new_stream()]) == []

    def test_threads_are_listed_by_profile(self, store: SqlEventStore) -> None:
        resource = f"res-{uuid.uuid4().hex}"
        for thread, profile in (("a", None), ("b", "support"), ("c", "support"), ("d", "coder")):
            state: dict[str, Any] = {"thread_id": f"{resource}-{thread}"}
            if profile is not None:
                state["profile"] = profile
            snapshot = StateSnapshot(
                state=state, tenant="acme", thread_id=state["thread_id"], resource_id=resource
            )
            store.append(f"acme/thread/{resource}-{thread}", [event(1)], 0, snapshot=snapshot)

        def listed(**profile: str | None) -> list[str]:
            rows = store.list_threads("acme", resource_id=resource, **profile)
            return sorted(r.thread_id.removeprefix(f"{resource}-") for r in rows)

        assert listed() == ["a", "b", "c", "d"]
        assert listed(profile="support") == ["b", "c"]
        assert listed(profile=None) == ["a"], "None is the default profile"
        assert listed(profile="nobody") == []
        rows = store.list_threads("acme", resource_id=resource, profile="coder")
        assert [r.profile for r in rows] == ["coder"]

    def test_threads_are_listed_with_their_creation_and_filtered_by_it(self, store: SqlEventStore) -> None:
        resource = f"res-{uuid.uuid4().hex}"

        def record(thread: str) -> StateSnapshot:
            return StateSnapshot(
                state={"thread_id": thread, "title": thread.upper()},
                tenant="acme",
                thread_id=thread,
                resource_id=resource,
            )

        older, newer = f"acme/thread/{resource}-old", f"acme/thread/{resource}-new"
        store.append(older, [event(1)], 0, snapshot=record(f"{resource}-old"))
        time.sleep(0.05)
        store.append(newer, [event(1)], 0, snapshot=record(f"{resource}-new"))
        # SQLite's clock counts milliseconds, and an append takes less: without a pause both rows could
        # carry the same updated_at, and the listing would order them by stream id
        time.sleep(0.01)
        # a later append updates the older thread, but it was still created first
        store.append(older, [event(2)], 1, snapshot=record(f"{resource}-old"))
        listed = store.list_threads("acme", resource_id=resource)
        assert [r.thread_id for r in listed] == [f"{resource}-old", f"{resource}-new"]
        created = {r.thread_id: r.created_at for r in listed}
        old_at, new_at = created[f"{resource}-old"], created[f"{resource}-new"]
        assert old_at is not None and new_at is not None and old_at < new_at
        between = old_at + (new_at - old_at) / 2
        after = store.list_threads("acme", resource_id=resource, created_after=between)
        assert [r.thread_id for r in after] == [f"{resource}-new"]
        before = store.list_threads("acme", resource_id=resource, created_before=between)
        assert [r.thread_id for r in before] == [f"{resource}-old"]

    # --- inline projection -----------------------------------------------------------------------------

    def test_snapshot_is_written_with_the_version_of_its_append(self, store: SqlEventStore) -> None:
        stream = new_stream()
        store.append(stream, [event(1), event(2)], 0, snapshot=snapshot(step=1))
        assert stored_state(store, stream) == ({"step": 1}, 2)
        store.append(stream, [event(3)], 2)
        assert stored_state(store, stream) == ({"step": 1}, 2)
        store.append(stream, [event(4)], 3, snapshot=snapshot(step=2))
        assert stored_state(store, stream) == ({"step": 2}, 4)

    def test_snapshot_names_the_position_of_its_last_event(self, store: SqlEventStore) -> None:
        stream = new_stream()
        one = store.append(stream, [message_event("m1")], 0, snapshot=snapshot(step=1))
        loaded = store.load_snapshot(stream)
        assert loaded is not None and loaded.position == one.global_positions[-1]
        many = store.append(stream, [event(2), message_event("m2")], 1, snapshot=snapshot(step=2))
        loaded = store.load_snapshot(stream)
        assert loaded is not None and (loaded.version, loaded.position) == (3, many.global_positions[-1])

    def test_the_record_row_follows_the_newest_thread_and_resource(self, store: SqlEventStore) -> None:
        stream = new_stream()
        resource = f"res-{uuid.uuid4().hex[:8]}"
        moved = StateSnapshot(state={"k": 2}, tenant="acme", thread_id="th-1", resource_id=resource)
        store.append(stream, [event(1)], 0, snapshot=snapshot(step=1))
        store.append(stream, [event(2)], 1, snapshot=snapshot(step=2))
        assert store.list_threads("acme", resource_id=resource) == []
        store.append(stream, [event(3)], 2, snapshot=moved)
        listed = store.list_threads("acme", resource_id=resource)
        assert [r.thread_id for r in listed] == [stream.rsplit("/", 1)[-1]]
        assert stored_state(store, stream) == ({"k": 2}, 3)

    def test_a_write_without_a_log_keeps_the_stored_one(self, store: SqlEventStore) -> None:
        stream = new_stream()
        store.append(stream, [event(1)], 0, snapshot=snapshot(step=1, log='[{"text": "a"}]'))
        second = store.append(stream, [message_event("m1")], 1, snapshot=snapshot(step=2))
        loaded = store.load_snapshot(stream)
        assert loaded is not None and loaded.state is not None and loaded.log is not None
        assert (json.loads(loaded.state), json.loads(loaded.log)) == ({"step": 2}, [{"text": "a"}])
        unchanged = store.load_snapshot(stream, known_position=second.global_positions[-1])
        assert unchanged is not None and (unchanged.state, unchanged.log) == (None, None)
        store.append(stream, [event(3), event(4)], 2, snapshot=snapshot(step=3, log='[{"text": "b"}]'))
        loaded = store.load_snapshot(stream)
        assert loaded is not None and loaded.log is not None and json.loads(loaded.log) == [{"text": "b"}]
        store.replace_snapshot(stream, snapshot(step=4, log="[]"), 4)
        loaded = store.load_snapshot(stream)
        assert loaded is not None and loaded.log == "[]"
        fresh = new_stream()
        store.append(fresh, [event(1)], 0, snapshot=snapshot(step=1))
        loaded = store.load_snapshot(fresh)
        assert loaded is not None and loaded.log is None

    def test_a_reader_holding_the_current_position_gets_no_document(self, store: SqlEventStore) -> None:
        stream = new_stream()
        first = store.append(stream, [event(1)], 0, snapshot=snapshot(step=1))
        position = first.global_positions[-1]
        unchanged = store.load_snapshot(stream, known_position=position)
        assert unchanged is not None and unchanged.state is None
        assert (unchanged.version, unchanged.position) == (1, position)
        store.append(stream, [event(2)], 1, snapshot=snapshot(step=2))
        changed = store.load_snapshot(stream, known_position=position)
        assert changed is not None and changed.state is not None
        assert json.loads(changed.state) == {"step": 2} and changed.position > position

    def test_a_reader_a_few_events_behind_gets_the_events_since(self, store: SqlEventStore) -> None:
        stream = new_stream()
        held = store.append(stream, [event(1)], 0, snapshot=snapshot(step=1)).global_positions[-1]
        store.append(stream, [event(2, note="ünï 🔴"), message_event("m1")], 1, snapshot=snapshot(step=2))
        last = store.append(stream, [event(4)], 3, snapshot=snapshot(step=3)).global_positions[-1]
        behind = store.load_snapshot(stream, known_position=held, known_version=1)
        assert behind is not None and (behind.version, behind.position) == (4, last)
        assert (behind.state, behind.log, behind.window) == (None, None, None)
        assert behind.events == tuple(store.read_stream(stream, after_version=1))
        current = store.load_snapshot(stream, known_position=last, known_version=4)
        assert current is not None and (current.state, current.events) == (None, None)

    def test_a_reader_far_behind_or_of_another_life_of_the_stream_gets_the_document(
        self, store: SqlEventStore
    ) -> None:
        stream = new_stream()
        held = store.append(stream, [event(1)], 0, snapshot=snapshot(step=1)).global_positions[-1]
        for version in range(1, CATCH_UP_EVENTS + 2):
            store.append(stream, [event(version + 1)], version, snapshot=snapshot(step=version + 1))
        far = store.load_snapshot(stream, known_position=held, known_version=1)
        assert far is not None and far.events is None and far.state is not None
        assert json.loads(far.state) == {"step": CATCH_UP_EVENTS + 2}
        store.delete_stream(stream)
        store.append(stream, [event(1)], 0, snapshot=snapshot(life=2))
        store.append(stream, [event(2)], 1, snapshot=snapshot(life=2, step=2))
        # version 1 exists again, at another position: the held state is not this stream's past
        other_life = store.load_snapshot(stream, known_position=held, known_version=1)
        assert other_life is not None and other_life.events is None and other_life.state is not None
        assert json.loads(other_life.state) == {"life": 2, "step": 2}

    def test_a_recreated_stream_never_repeats_a_position(self, store: SqlEventStore) -> None:
        stream = new_stream()
        old = store.append(stream, [event(1)], 0, snapshot=snapshot(life=1)).global_positions[-1]
        store.delete_stream(stream)
        store.append(stream, [event(1)], 0, snapshot=snapshot(life=2))
        loaded = store.load_snapshot(stream, known_position=old)
        assert loaded is not None and loaded.version == 1 and loaded.position > old
        assert loaded.state is not None and json.loads(loaded.state) == {"life": 2}

    def test_snapshot_json_round_trips_byte_identical_under_sort_keys(self, store: SqlEventStore) -> None:
        stream = new_stream()
        state = {
            "zeta": [3, 2, 1, {"b": None, "a": True}],
            "alpha": {"nested": {"y": -7, "x": 0.1, "w": 1.5e-7}, "list": []},
            "text": 'naïve 🔴 "quoted" \\ back\nline\ttab \u2028',
            "big": 2**53 + 1,
            "neg": -12345678901234,
            "float": 3.141592653589793,
            "whole_float": 2.0,
            "empty": {},
            "false": False,
        }
        store.append(stream, [event(1)], 0, snapshot=snapshot(**state))
        loaded = stored_state(store, stream)
        assert loaded is not None
        assert json.dumps(loaded[0], sort_keys=True) == json.dumps(state, sort_keys=True)
        assert type(loaded[0]["whole_float"]) is float

    def test_replace_snapshot_overwrites_the_projection(self, store: SqlEventStore) -> None:
        stream = new_stream()
        appended = store.append(stream, [event(1), event(2)], 0, snapshot=snapshot(old=True))
        store.replace_snapshot(stream, snapshot(rebuilt=True), 2)
        assert stored_state(store, stream) == ({"rebuilt": True}, 2)
        loaded = store.load_snapshot(stream)
        assert loaded is not None and loaded.position == appended.global_positions[-1]
        fresh = new_stream()
        store.replace_snapshot(fresh, snapshot(rebuilt=True), 0)
        assert stored_state(store, fresh) == ({"rebuilt": True}, 0)

    # --- vector index of observation groups --------------------------------------------------------

    def test_indexed_groups_are_replaced_by_key_and_found_by_stream_or_resource(
        self, store: SqlEventStore
    ) -> None:
        tenant = f"t{uuid.uuid4().hex[:8]}"
        first, second, elsewhere = (f"{tenant}/thread/{n}" for n in ("a", "b", "c"))
        sources = {stream: source_event(store, stream) for stream in (first, second, elsewhere)}
        for stream, groups in (
            (
                first,
                [
                    indexed(first, "g1", resource="r1", embedding=[1.0, 0.0]),
                    indexed(first, "g2", resource="r1", observed_at="2026-03-02T11:00:00.000Z"),
                ],
            ),
            (second, [indexed(second, "g1", resource="r1")]),
            (elsewhere, [indexed(elsewhere, "g9", resource="r2")]),
        ):
            assert store.upsert_indexed_groups(groups, source_event_id=sources[stream]) == len(groups)
        store.upsert_indexed_groups(
            [indexed(first, "g1", resource="r1", text="rewritten", embedding=[0.5, 0.5])],
            source_event_id=sources[first],
        )
        by_stream = store.load_indexed_groups(tenant, stream_ids=[first])
        assert [(g.group_id, g.text, g.embedding) for g in by_stream] == [
            ("g1", "rewritten", [0.5, 0.5]),
            ("g2", "text of g2", [0.0, 1.0]),
        ]
        by_resource = store.load_indexed_groups(tenant, resource_id="r1")
        assert sorted((g.stream_id, g.group_id) for g in by_resource) == [
            (first, "g1"),
            (first, "g2"),
            (second, "g1"),
        ]
        assert store.load_indexed_groups("another-tenant", stream_ids=[first], resource_id="r1") == []
        assert store.load_indexed_groups(tenant) == []

    def test_erasing_a_stream_erases_its_indexed_groups(self, store: SqlEventStore) -> None:
        tenant = f"t{uuid.uuid4().hex[:8]}"
        stream, other = f"{tenant}/thread/a", f"{tenant}/thread/b"
        store.upsert_indexed_groups([indexed(stream, "g1")], source_event_id=source_event(store, stream))
        store.upsert_indexed_groups([indexed(other, "g1")], source_event_id=source_event(store, other))
        store.delete_stream(stream)
        assert store.load_indexed_groups(tenant, stream_ids=[stream, other]) == [indexed(other, "g1")]

    def test_groups_of_an_erased_event_are_never_written(self, store: SqlEventStore) -> None:
        tenant = f"t{uuid.uuid4().hex[:8]}"
        stream = f"{tenant}/thread/a"
        source = source_event(store, stream)
        store.delete_stream(stream)
        assert store.upsert_indexed_groups([indexed(stream, "g1")], source_event_id=source) == 0
        assert store.load_indexed_groups(tenant, stream_ids=[stream]) == []

    # --- outbox ----------------------------------------------------------------------------------------

    def test_outbox_rows_are_written_and_a_known_key_is_a_no_op(self, store: SqlEventStore) -> None:
        stream = new_stream()
        key = f"{stream}/observe/1"
        store.append(stream, [event(1)], 0, tasks=[task(key), task(f"{stream}/reflect/1")])
        store.append(stream, [event(2)], 1, tasks=[task(key)])
        rows = self.outbox_rows(store, stream)
        assert sorted(r.key for r in rows) == sorted([key, f"{stream}/reflect/1"])
        assert all(r.published_at is None and r.attempts == 0 for r in rows)
        assert store.stream_version(stream) == 2

    def test_unpublished_tasks_are_fetched_until_marked_published(self, store: SqlEventStore) -> None:
        stream = new_stream()
        store.append(stream, [event(1)], 0, tasks=[task(f"{stream}/1"), task(f"{stream}/2")])
        mine = [t for t in store.fetch_unpublished_tasks(limit=1000) if t.stream_id == stream]
        assert [t.key for t in mine] == [f"{stream}/1", f"{stream}/2"]
        assert mine[0].task_name == "om.observe" and mine[0].queue == "om.buffer"
        assert mine[0].payload == {"cycle_id": f"{stream}/1"}
        assert mine[0].created_at.tzinfo is not None
        assert not [
            t for t in store.fetch_unpublished_tasks(1000, older_than_seconds=3600) if t.stream_id == stream
        ]

        assert store.mark_tasks_published([mine[0].id]) == 1
        assert store.mark_tasks_published([mine[0].id]) == 0
        left = [t.key for t in store.fetch_unpublished_tasks(limit=1000) if t.stream_id == stream]
        assert left == [f"{stream}/2"]

    def test_tasks_can_be_marked_published_by_key(self, store: SqlEventStore) -> None:
        stream = new_stream()
        store.append(stream, [event(1)], 0, tasks=[task(f"{stream}/1"), task(f"{stream}/2")])
        assert store.mark_keys_published([f"{stream}/2", f"{stream}/unknown"]) == 1
        assert store.mark_keys_published([f"{stream}/2"]) == 0
        left = [t.key for t in store.fetch_unpublished_tasks(limit=1000) if t.stream_id == stream]
        assert left == [f"{stream}/1"]

    def test_a_completed_task_is_never_published_again(self, store: SqlEventStore) -> None:
        stream = new_stream()
        store.append(stream, [event(1)], 0, tasks=[task(f"{stream}:ran-inline"), task(f"{stream}:published")])
        assert store.mark_keys_published([f"{stream}:published"]) == 1
        # one ran before it was published (a reader's fallback), one after: neither is published again
        assert store.mark_tasks_completed([f"{stream}:ran-inline", f"{stream}:published"]) == 2
        assert store.mark_tasks_completed([f"{stream}:published"]) == 0
        assert not [t for t in store.fetch_unpublished_tasks(limit=1000) if t.stream_id == stream]
        time.sleep(0.01)
        store.requeue_lost_tasks(older_than_seconds=0.001)
        assert not [t for t in store.fetch_unpublished_tasks(limit=1000) if t.stream_id == stream]

    def test_a_published_task_that_never_completed_is_requeued_unless_its_work_is_leased(
        self, store: SqlEventStore
    ) -> None:
        stream = new_stream()
        lost, running, retrying = (f"{stream}:{name}" for name in ("lost", "running", "retrying"))
        store.append(stream, [event(1)], 0, tasks=[task(lost), task(running), task(retrying)])
        assert store.mark_keys_published([lost, running, retrying]) == 3
        assert store.acquire_lease(running, stream, "host/1/a", 30) is None
        store.postpone_task(retrying, 3600)
        # a task is lost only once it is that old
        assert store.requeue_lost_tasks(older_than_seconds=3600) == 0
        time.sleep(0.01)
        requeued = store.requeue_lost_tasks(older_than_seconds=0.001)
        again = [t.key for t in store.fetch_unpublished_tasks(limit=1000) if t.stream_id == stream]
        assert again == [lost]
        assert requeued >= 1
        store.mark_tasks_published([t.id for t in store.fetch_unpublished_tasks(limit=1000) if t.key == lost])
        store.mark_tasks_completed([lost])
        time.sleep(0.01)
        store.requeue_lost_tasks(older_than_seconds=0.001)
        assert not [t for t in store.fetch_unpublished_tasks(limit=1000) if t.stream_id == stream]

    # --- leases ----------------------------------------------------------------------------------------

    def test_a_lease_is_held_by_one_holder_until_it_lapses_or_is_released(self, store: SqlEventStore) -> None:
        stream = new_stream()
        key = f"{stream}:cycle-1"
        assert store.live_holder(key) is None
        assert store.acquire_lease(key, stream, "host/1/a", 30) is None
        assert store.live_holder(key) == "host/1/a"
        # nobody else takes it, not even another thread of the same holder
        assert store.acquire_lease(key, stream, "host/2/b", 30) == "host/1/a"
        assert store.acquire_lease(key, stream, "host/1/a", 30) == "host/1/a"
        assert store.renew_leases([key, f"{stream}:other"], "host/1/a", 30) == {key}
        assert store.renew_leases([key], "host/2/b", 30) == set()
        assert not [lease for lease in store.lapsed_leases() if lease.key == key]
        store.release_lease(key, "host/2/b")
        assert store.acquire_lease(key, stream, "host/2/b", 30) == "host/1/a"
        store.release_lease(key, "host/1/a")
        assert store.acquire_lease(key, stream, "host/2/b", 30) is None

    def test_a_lapsed_lease_is_listed_and_taken_over(self, store: SqlEventStore) -> None:
        stream = new_stream()
        key = f"{stream}:cycle-1"
        assert store.acquire_lease(key, stream, "host/1/a", 0.05) is None
        time.sleep(0.2)
        [lapsed] = [lease for lease in store.lapsed_leases() if lease.key == key]
        assert (lapsed.stream_id, lapsed.holder) == (stream, "host/1/a")
        assert store.live_holder(key) is None
        assert lapsed.expires_at.tzinfo is not None
        # a renewal after the lapse still finds it its own, if nobody took it meanwhile
        assert store.renew_leases([key], "host/1/a", 0.05) == {key}
        time.sleep(0.2)
        assert store.acquire_lease(key, stream, "host/2/b", 30) is None
        assert store.renew_leases([key], "host/1/a", 30) == set()
        assert not store.remove_lapsed_lease(lapsed), "held again: not lapsed any more"
        assert not [lease for lease in store.lapsed_leases() if lease.key == key]

    def test_a_holder_known_dead_is_replaced_at_once(self, store: SqlEventStore) -> None:
        stream = new_stream()
        key = f"{stream}:cycle-1"
        assert store.acquire_lease(key, stream, "host/1/a", 30) is None
        assert store.acquire_lease(key, stream, "host/2/b", 30, replacing="host/9/z") == "host/1/a"
        assert store.acquire_lease(key, stream, "host/2/b", 30, replacing="host/1/a") is None
        assert store.renew_leases([key], "host/2/b", 30) == {key}

    def test_a_lapsed_lease_is_removed_only_while_still_lapsed_and_erasure_removes_leases(
        self, store: SqlEventStore
    ) -> None:
        stream = new_stream()
        store.append(stream, [event(1)], 0)
        assert store.acquire_lease(f"{stream}:a", stream, "host/1/a", 0.05) is None
        assert store.acquire_lease(f"{stream}:b", stream, "host/1/a", 30) is None
        time.sleep(0.2)
        [lapsed] = [lease for lease in store.lapsed_leases() if lease.stream_id == stream]
        assert store.remove_lapsed_lease(lapsed)
        assert not store.remove_lapsed_lease(lapsed)
        store.delete_stream(stream)
        assert store.acquire_lease(f"{stream}:b", stream, "host/2/b", 30) is None

    def test_streams_with_pending_work_are_listed_from_the_projection(self, store: SqlEventStore) -> None:
        tenant = f"t{uuid.uuid4().hex[:8]}"
        idle, chunks, cycle = (f"{tenant}/thread/{name}" for name in ("idle", "chunks", "cycle"))
        store.append(idle, [event(1)], 0, snapshot=snapshot(chunks=[]))
        store.append(chunks, [event(1)], 0, snapshot=snapshot(pending_work=True, chunks=[{"id": "c1"}]))
        store.append(cycle, [event(1), event(2)], 0, snapshot=snapshot(pending_work=True, step=1))
        pending = store.list_streams_with_pending_work(after=f"{tenant}/", limit=1000)
        assert [s for s in pending if s.startswith(f"{tenant}/")] == [chunks, cycle]
        store.append(cycle, [event(3)], 2, snapshot=snapshot(step=2))
        store.replace_snapshot(idle, snapshot(pending_work=True, step=3), 1)
        pending = store.list_streams_with_pending_work(after=f"{tenant}/", limit=1000)
        assert [s for s in pending if s.startswith(f"{tenant}/")] == [chunks, idle]

    # --- reading ---------------------------------------------------------------------------------------

    def test_read_stream_after_a_version_and_with_a_limit(self, store: SqlEventStore) -> None:
        stream = new_stream()
        store.append(stream, [event(i) for i in range(1, 11)], 0)
        assert [r.stream_version for r in store.read_stream(stream, after_version=7)] == [8, 9, 10]
        assert [r.stream_version for r in store.read_stream(stream, after_version=2, limit=3)] == [3, 4, 5]
        assert [r.stream_version for r in store.read_stream(stream, limit=2)] == [1, 2]
        assert store.read_stream(stream, after_version=10) == []

    def test_read_all_returns_every_stream_in_commit_order(self, store: SqlEventStore) -> None:
        a, b = new_stream(), new_stream()
        written = [
            store.append(a, [event(1), event(2)], 0),
            store.append(b, [event(1)], 0),
            store.append(a, [event(3)], 2),
        ]
        expected = [p for result in written for p in result.global_positions]
        mine = [e for e in read_everything(store) if e.stream_id in (a, b)]
        assert [e.global_position for e in mine] == expected
        assert [(e.stream_id, e.stream_version) for e in mine] == [(a, 1), (a, 2), (b, 1), (a, 3)]

        cursor = mine[1].global_position
        rest = [e for e in store.read_all(cursor, limit=1000) if e.stream_id in (a, b)]
        assert [e.global_position for e in rest] == expected[2:]
        assert len(store.read_all(0, limit=2)) == 2

    def test_find_event_by_id(self, store: SqlEventStore) -> None:
        stream = new_stream()
        target = event(2)
        store.append(stream, [event(1), target], 0)
        found = store.find_event(target.event_id)
        assert found is not None and (found.stream_id, found.stream_version) == (stream, 2)
        assert store.find_event(uuid.uuid4()) is None

    def test_stream_ids_by_prefix(self, store: SqlEventStore) -> None:
        tenant = f"t{uuid.uuid4().hex[:8]}"
        names = [f"{tenant}/thread/a", f"{tenant}/thread/b", f"{tenant}/resource/r", f"{tenant}_x/thread/c"]
        for name in names:
            store.append(name, [event(1)], 0)
        assert store.list_stream_ids(f"{tenant}/thread/") == [f"{tenant}/thread/a", f"{tenant}/thread/b"]
        assert store.list_stream_ids(f"{tenant}/", after=f"{tenant}/thread/a") == [f"{tenant}/thread/b"]
        # '_' and '%' in a prefix are literal characters, not LIKE wildcards.
        assert store.list_stream_ids(f"{tenant}_") == [f"{tenant}_x/thread/c"]
        assert store.list_stream_ids(f"{tenant}%") == []
        assert list(store.iter_streams(f"{tenant}/")) == sorted(names[:3])

    # --- erasing ---------------------------------------------------------------------------------------

    def test_delete_stream_removes_events_projection_messages_and_queued_work(
        self, store: SqlEventStore
    ) -> None:
        stream, other = new_stream(), new_stream()
        store.append(
            stream,
            [event(1), message_event("m1")],
            0,
            snapshot=snapshot(),
            tasks=[task(f"{stream}/sent"), task(f"{stream}/queued")],
        )
        store.append(other, [message_event("m1")], 0, snapshot=snapshot(), tasks=[task(f"{other}/queued")])
        sent = next(t for t in store.fetch_unpublished_tasks(1000) if t.key == f"{stream}/sent")
        store.mark_tasks_published([sent.id])

        assert store.delete_stream(stream) == 2

        assert store.read_stream(stream) == []
        assert store.stream_version(stream) == 0
        assert store.load_snapshot(stream) is None
        assert store.find_messages(stream, ["m1"]) == {}
        assert store.read_messages(stream) == []
        assert self.outbox_rows(store, stream) == []
        assert all(e.stream_id != stream for e in read_everything(store))
        assert store.stream_version(other) == 1 and store.load_snapshot(other) is not None
        assert store.find_messages(other, ["m1"]) and len(self.outbox_rows(store, other)) == 1
        assert store.delete_stream(stream) == 0
        store.append(stream, [event(1)], 0)
        assert store.stream_version(stream) == 1

    def test_a_writer_of_an_erased_lineage_never_appends_to_the_recreated_stream(
        self, store: SqlEventStore
    ) -> None:
        stream = new_stream()
        old = store.append(stream, [event(1), event(2), event(3)], 0, snapshot=snapshot())
        store.delete_stream(stream)
        new = store.append(stream, [event(1), event(2), event(3)], 0, snapshot=snapshot())
        # same version as the writer read, but another lineage: refused
        with pytest.raises(ConcurrencyError):
            store.append(stream, [event(4)], 3, expected_position=old.global_positions[-1])
        assert store.stream_version(stream) == 3
        store.append(stream, [event(4)], 3, expected_position=new.global_positions[-1], snapshot=snapshot())
        loaded = store.load_snapshot(stream)
        assert loaded is not None and loaded.version == 4

    def test_the_row_and_its_window_come_from_one_read(self, store: SqlEventStore) -> None:
        stream = new_stream()
        store.append(
            stream,
            [message_event("m1", seq=1), message_event("m2", seq=2), message_event("m3", seq=3)],
            0,
            snapshot=StateSnapshot(
                state={"k": 1}, tenant="acme", thread_id="th-1", resource_id=None, observed_seq=1
            ),
        )
        loaded = store.load_snapshot(stream)
        assert loaded is not None and loaded.window is not None
        assert [(m.message_id, m.seq, m.stream_version) for m in loaded.window] == [
            ("m2", 2, 2),
            ("m3", 3, 3),
        ]
        assert loaded.window[0].created_at == datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
        assert loaded.window[0].message["parts"][0]["text"] == "hello there"
        held = store.load_snapshot(stream, known_position=loaded.position)
        assert held is not None and held.state is None and held.window is None

    def test_positions_are_not_reused_after_a_delete(self, store: SqlEventStore) -> None:
        stream = new_stream()
        result = store.append(stream, [event(1)], 0)
        store.delete_stream(stream)
        again = store.append(new_stream(), [event(1)], 0)
        assert again.global_positions[0] > result.global_positions[0]

    # --- upcasting -------------------------------------------------------------------------------------

    def test_upcasters_bring_old_events_to_the_current_schema_on_read(self, store: SqlEventStore) -> None:
        stream = new_stream()
        old = NewEvent("ThreadTitled", {"name": "Trip"}, schema_version=1)
        current = NewEvent("ThreadTitled", {"title": "Plans", "source": "user"}, schema_version=2)
        store.append(stream, [old, current], 0)

        upcasters = Upcasters()

        @upcasters.step("ThreadTitled", 1)
        def rename_name_to_title(data: dict[str, Any]) -> dict[str, Any]:
            data["title"] = data.pop("name")
            return data

        upcasters.register("ThreadTitled", 2, lambda data: {**data, "source": data.get("source", "unknown")})
        reader = SqlEventStore(store.engine, upcasters=upcasters)

        expected = [{"title": "Trip", "source": "unknown"}, {"title": "Plans", "source": "user"}]
        assert [(e.schema_version, e.data) for e in reader.read_stream(stream)] == [(3, d) for d in expected]
        from_all = [e for e in read_everything(reader) if e.stream_id == stream]
        assert [e.data for e in from_all] == expected
        found = reader.find_event(old.event_id)
        assert found is not None and found.data == expected[0]
        # The stored event is untouched: a store without upcasters still reads version 1.
        assert store.read_stream(stream)[0].data == {"name": "Trip"}

    # --- concurrency -----------------------------------------------------------------------------------

    def test_two_writers_on_one_stream_give_exactly_one_conflict(self, store: SqlEventStore) -> None:
        for _ in range(15):
            stream = new_stream()
            store.append(stream, [event(0)], 0)
            barrier = threading.Barrier(2)
            outcomes: list[str] = []

            def write(
                n: int,
                stream: str = stream,
                barrier: threading.Barrier = barrier,
                outcomes: list[str] = outcomes,
            ) -> None:
                barrier.wait()
                try:
                    store.append(stream, [event(n)], 1, snapshot=snapshot(writer=n))
                    outcomes.append("ok")
                except ConcurrencyError as conflict:
                    assert conflict.actual_version == 2
                    outcomes.append("conflict")

            threads = [threading.Thread(target=write, args=(n,)) for n in (1, 2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sorted(outcomes) == ["conflict", "ok"]
            assert store.stream_version(stream) == 2
            state = stored_state(store, stream)
            assert state is not None and state[1] == 2
            assert state[0]["writer"] == store.read_stream(stream)[-1].data["n"]

    def slow_writer(self, store: SqlEventStore, stop: threading.Event) -> list[uuid.UUID]:
        """Ids of events written by transactions held open while others commit.

        Only a backend whose positions can commit out of order needs this; SQLite commits one writer at a
        time in position order, so by default there are none.
        """
        return []

    def test_concurrent_writers_and_a_tailing_reader_lose_nothing(self, store: SqlEventStore) -> None:
        shared = [new_stream("shared") for _ in range(3)]
        written: list[uuid.UUID] = []
        written_lock = threading.Lock()
        stop_reader = threading.Event()
        failures: list[BaseException] = []
        seen: list[RecordedEvent] = []

        def writer(index: int) -> None:
            rng = random.Random(index)
            own = new_stream()
            versions: dict[str, int] = defaultdict(int)
            try:
                for n in range(40):
                    stream = own if n % 2 else rng.choice(shared)
                    while True:
                        batch = [event(n) for _ in range(rng.randint(1, 3))]
                        try:
                            store.append(stream, batch, versions[stream], snapshot=snapshot(n=n))
                        except ConcurrencyError as conflict:
                            versions[stream] = conflict.actual_version or 0
                            continue
                        versions[stream] += len(batch)
                        with written_lock:
                            written.extend(e.event_id for e in batch)
                        break
            except BaseException as error:
                failures.append(error)

        start = store.read_all(0, limit=1_000_000)
        cursor = start[-1].global_position if start else 0

        def reader() -> None:
            position = cursor
            try:
                while True:
                    done = stop_reader.is_set()
                    page = store.read_all(position, limit=200)
                    seen.extend(page)
                    if page:
                        position = page[-1].global_position
                    elif done:
                        return
                    else:
                        time.sleep(0.002)
            except BaseException as error:
                failures.append(error)

        slow_stop = threading.Event()
        slow_result: list[uuid.UUID] = []
        slow = threading.Thread(target=lambda: slow_result.extend(self.slow_writer(store, slow_stop)))
        tail = threading.Thread(target=reader)
        writers = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
        tail.start()
        slow.start()
        for thread in writers:
            thread.start()
        for thread in writers:
            thread.join()
        slow_stop.set()
        slow.join()
        stop_reader.set()
        tail.join()

        assert not failures, failures
        expected_ids = set(written) | set(slow_result)
        seen_ids = [e.event_id for e in seen]
        assert len(seen_ids) == len(set(seen_ids)), "an event was delivered twice"
        assert set(seen_ids) == expected_ids
        by_stream: dict[str, list[int]] = defaultdict(list)
        for e in seen:
            by_stream[e.stream_id].append(e.stream_version)
        for versions in by_stream.values():
            assert versions == list(range(1, len(versions) + 1))
        if not self.postgres:
            positions = [e.global_position for e in seen]
            assert positions == sorted(positions)
        for stream in shared:
            assert store.stream_version(stream) == len(by_stream[stream])


class TestSqliteEventStore(EventStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SqlEventStore]:
        url = f"sqlite:///{tmp_path / 'nested' / 'om.db'}"
        upgrade_to_head(url)
        store = create_event_store(url)
        yield store
        store.close()

    def test_database_runs_in_wal_mode(self, store: SqlEventStore) -> None:
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


@pytest.mark.integration
class TestPostgresEventStore(EventStoreContract):
    postgres = True

    @pytest.fixture
    def store(self, migrated_postgres_url: str) -> Iterator[SqlEventStore]:
        store = create_event_store(migrated_postgres_url, pool_size=12)
        yield store
        store.close()

    def slow_writer(self, store: SqlEventStore, stop: threading.Event) -> list[uuid.UUID]:
        """Raw transactions that take a position, sleep while others commit later positions, then commit."""
        stream = new_stream("slow")
        ids: list[uuid.UUID] = []
        version = 0
        while not stop.is_set():
            event_id = uuid.uuid4()
            with transactional(store).connect() as conn, conn.begin():
                conn.execute(
                    sa.insert(events_table).values(
                        stream_id=stream,
                        stream_version=version + 1,
                        event_id=event_id,
                        event_type="Slow",
                        schema_version=1,
                        data={"n": version},
                        metadata={},
                    )
                )
                conn.exec_driver_sql("SELECT pg_sleep(0.03)")
            version += 1
            ids.append(event_id)
        return ids

    def test_an_append_racing_an_erasure_waits_for_it_and_writes_nothing(self, store: SqlEventStore) -> None:
        """The erasure has deleted the predecessor but not committed: the append's snapshot still shows the
        predecessor, so only the lock on it keeps the append from landing behind the erasure."""
        stream = new_stream()
        head = store.append(stream, [event(1), event(2)], 0, snapshot=snapshot())
        outcome: dict[str, Any] = {}

        def append() -> None:
            try:
                store.append(
                    stream, [event(3)], 2, expected_position=head.global_positions[-1], snapshot=snapshot()
                )
                outcome["result"] = "appended"
            except ConcurrencyError:
                outcome["result"] = "conflict"

        with transactional(store).connect() as conn, conn.begin():
            conn.execute(sa.delete(events_table).where(events_table.c.stream_id == stream))
            writer = threading.Thread(target=append)
            writer.start()
            writer.join(0.5)
            assert writer.is_alive(), "the append did not wait for the erasure"
        writer.join(10)
        assert outcome == {"result": "conflict"}
        assert store.read_stream(stream) == []

    def test_an_erasure_waits_for_an_append_in_flight_and_erases_what_it_wrote(
        self, store: SqlEventStore
    ) -> None:
        """An append that locked its predecessor first commits an event the erasure's first snapshot
        cannot see: the erasure must still leave nothing of the stream."""
        stream = new_stream()
        store.append(stream, [event(1), event(2)], 0, snapshot=snapshot())
        erased: dict[str, int] = {}
        with transactional(store).connect() as conn, conn.begin():
            # what the append statement does: lock the predecessor, insert the next event and its row
            conn.exec_driver_sql(
                "SELECT 1 FROM om_events WHERE stream_id = %(s)s AND stream_version = 2 FOR KEY SHARE",
                {"s": stream},
            )
            conn.execute(
                sa.insert(events_table).values(
                    stream_id=stream,
                    stream_version=3,
                    event_id=uuid.uuid4(),
                    event_type="Noted",
                    schema_version=1,
                    data={"n": 3},
                    metadata={},
                )
            )
            eraser = threading.Thread(target=lambda: erased.update(n=store.delete_stream(stream)))
            eraser.start()
            eraser.join(0.5)
            assert eraser.is_alive(), "the erasure did not wait for the append in flight"
        eraser.join(10)
        assert erased == {"n": 3}
        assert store.read_stream(stream) == []
        assert store.load_snapshot(stream) is None

    @staticmethod
    def keep_appending(
        store: SqlEventStore, stream: str, stop: threading.Event, failures: list[BaseException]
    ) -> None:
        """Append to ``stream`` from what was last read, until told to stop; a lost race is re-read."""
        try:
            while not stop.is_set():
                loaded = store.load_snapshot(stream)
                version, position = (0, None) if loaded is None else (loaded.version, loaded.position)
                with contextlib.suppress(ConcurrencyError):
                    store.append(
                        stream, [event(version + 1)], version, expected_position=position, snapshot=snapshot()
                    )
        except BaseException as error:
            failures.append(error)

    def test_erasures_racing_appenders_never_leave_an_orphan(self, store: SqlEventStore) -> None:
        """Random interleavings: two appenders keep appending (re-reading on every conflict) while the
        stream is erased now and then. Whatever is left is one whole lineage, versions 1..n."""
        rng = random.Random(7)
        for _ in range(12):
            stream = new_stream()
            store.append(stream, [event(0)], 0, snapshot=snapshot())
            stop = threading.Event()
            failures: list[BaseException] = []

            writers = [
                threading.Thread(target=self.keep_appending, args=(store, stream, stop, failures))
                for _ in range(2)
            ]
            for writer in writers:
                writer.start()
            time.sleep(rng.uniform(0.005, 0.05))
            store.delete_stream(stream)
            time.sleep(rng.uniform(0.0, 0.02))
            stop.set()
            for writer in writers:
                writer.join(10)
            assert not failures, failures
            left = store.read_stream(stream)
            assert [e.stream_version for e in left] == list(range(1, len(left) + 1))
            positions = [e.global_position for e in left]
            assert positions == sorted(positions)
            loaded = store.load_snapshot(stream)
            if left:
                assert loaded is not None and (loaded.version, loaded.position) == (
                    left[-1].stream_version,
                    left[-1].global_position,
                )
            else:
                assert loaded is None

    def test_reader_never_skips_a_lower_position_committed_late(self, store: SqlEventStore) -> None:
        """A transaction with the older transaction id may take the higher position. Reading positions in
        order with the oldest-open-transaction filter alone would step past the lower one; the store
        delivers both, each once."""
        early, late = new_stream(), new_stream()
        start = read_everything(store)
        cursor = start[-1].global_position if start else 0

        def insert(conn: sa.Connection, stream: str) -> int:
            statement = (
                sa.insert(events_table)
                .values(
                    stream_id=stream,
                    stream_version=1,
                    event_id=uuid.uuid4(),
                    event_type="Noted",
                    schema_version=1,
                    data={},
                    metadata={},
                )
                .returning(events_table.c.global_position)
            )
            return int(conn.execute(statement).scalar_one())

        engine = transactional(store)
        with engine.connect() as older, engine.connect() as younger:
            older.begin()
            older.exec_driver_sql("SELECT pg_current_xact_id()")  # the older transaction id
            younger.begin()
            low = insert(younger, late)
            high = insert(older, early)
            assert low < high
            older.commit()

            # an unrelated transaction open elsewhere on the server holds the horizon back for a moment
            deadline = time.monotonic() + 10
            while True:
                first = [e for e in store.read_all(cursor) if e.stream_id in (early, late)]
                if first or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert [e.global_position for e in first] == [high]
            with store.engine.connect() as naive:
                visible = naive.execute(
                    sa.select(events_table.c.global_position).where(
                        events_table.c.global_position > cursor,
                        events_table.c.stream_id.in_([early, late]),
                    )
                )
                assert [p for (p,) in visible] == [high]  # a plain position cursor would now be past ``low``
            younger.commit()

        second = [e for e in store.read_all(first[-1].global_position) if e.stream_id in (early, late)]
        assert [e.global_position for e in second] == [low]

    def test_a_conflict_whose_connection_is_lost_before_its_rollback_is_still_a_conflict(
        self, store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The backend is terminated after it answered the append with a unique violation and before the
        store rolled back (a soak's ``pg_terminate_backend`` landed there once): the append is reported as
        the conflict it was, never as the lost connection, and the store goes on with a new connection."""
        stream = new_stream()
        first = event(1)
        store.append(stream, [first], 0, snapshot=snapshot())
        admin = psycopg.connect(store.engine.url.set(drivername="postgresql").render_as_string(False))
        admin.autocommit = True
        rollback = psycopg.Connection.rollback
        terminated: list[int] = []

        def lost_before_rollback(conn: psycopg.Connection[Any]) -> None:
            if not terminated:
                pid = conn.info.backend_pid
                admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
                terminated.append(pid)
                # the driver reads the server's farewell, then the closed socket, and marks the connection bad
                for _ in range(100):
                    try:
                        conn.pgconn.consume_input()
                    except psycopg.OperationalError:
                        break
                    time.sleep(0.01)
            rollback(conn)

        monkeypatch.setattr(psycopg.Connection, "rollback", lost_before_rollback)
        try:
            with pytest.raises(DuplicateEventError):
                store.append(stream, [first], 1)
            assert terminated, "the append's unique violation never reached the rollback"
        finally:
            monkeypatch.undo()
            admin.close()
        second = event(2)
        store.append(stream, [second], 1, snapshot=snapshot())
        assert [(e.stream_version, e.event_id) for e in store.read_stream(stream)] == [
            (1, first.event_id),
            (2, second.event_id),
        ], "the stream holds each append once, in order"

    def test_connections_killed_while_idle_in_the_pool_fail_no_request(self, store: SqlEventStore) -> None:
        """Postgres restarted, or every backend of the database terminated, while the pool held idle
        connections: the first read that meets a dead one runs again on a new connection, and the pool
        hands out none of the others, so no read and no later append fails."""
        stream = new_stream()
        store.append(stream, [event(1)], 0, snapshot=snapshot())
        held = [store.engine.raw_connection() for _ in range(4)]
        for connection in held:
            connection.close()  # back into the pool, idle
        with psycopg.connect(store.engine.url.set(drivername="postgresql").render_as_string(False)) as admin:
            admin.autocommit = True
            terminated = admin.execute(
                "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        assert terminated is not None and terminated[0] >= 4
        found = store.load_snapshot(stream)
        assert found is not None and found.version == 1
        store.append(stream, [event(2)], 1, snapshot=snapshot())
        assert [m.seq for m in store.read_messages(stream)] == []
        assert [e.stream_version for e in store.read_stream(stream)] == [1, 2]
        found = store.load_snapshot(stream)
        assert found is not None and found.version == 2, "the record row moved with the append"

    def test_unreachable_database_raises_store_unavailable(self) -> None:
        store = create_event_store("postgresql+psycopg://postgres@127.0.0.1:1/nowhere?connect_timeout=2")
        with pytest.raises(StoreUnavailableError):
            store.stream_version("acme/thread/x")
        with pytest.raises(StoreUnavailableError):
            store.append("acme/thread/x", [event(1)], 0)
        store.close()
