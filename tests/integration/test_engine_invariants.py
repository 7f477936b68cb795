"""Random interleavings of the whole engine, checked against the invariants of semantics §8 after each step.

The engine runs for real: SQLite store, litellm with the local model, the application use cases. Only the
scheduling of background work is in the test's hands: requested tasks wait in a queue until a rule runs
one of them, in any order, once or twice (a duplicate delivery). Failures come from the model itself,
switched on through the thread's configuration (``providerOptions.omLocal``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from om_core.adapters.models.litellm_gateway import LiteLLMGateway
from om_core.adapters.store.migrations import upgrade_to_head
from om_core.application.append import append_messages, configure_thread
from om_core.application.configuration import record_config
from om_core.application.context import ObservationFailedError, get_context
from om_core.application.ports import WorkDispatcher
from om_core.application.projections import canonical
from om_core.application.repository import load_state, replay_state, snapshot_of
from om_core.application.streams import thread_stream_id
from om_core.application.work import WorkOutcome, run_task
from om_core.bootstrap import build_deps
from om_core.domain import policy
from om_core.domain.envelope import TaskRequest
from om_core.domain.events import (
    ChunksActivated,
    ObservationBufferCompleted,
    SyncObservationCompleted,
    from_recorded,
)
from om_core.domain.parts import cycle_closure

TENANT = "prop"
THREAD = "t"
STREAM = thread_stream_id(TENANT, THREAD)
PROFILE: dict[str, Any] = {
    "model": "om-local/extractive",
    "observation": {"messageTokens": 400, "bufferTokens": 0.25, "bufferActivation": 0.8, "blockAfter": 1.5},
    "reflection": {"observationTokens": 300, "bufferActivation": 0.5, "blockAfter": 1.3},
    "activateAfterIdle": "5m",
    "modelRetry": {"maxRetries": 0},
}
FAILURE_MODES: dict[str, dict[str, Any]] = {
    "normal": {},
    "error": {"errorRate": 1.0},
    "empty": {"output": "empty"},
    "degenerate": {"output": "degenerate"},
}
SENTENCES = (
    "My sister Priya lives in Lisbon.",
    "I was born in Porto in 1988.",
    "What is a good recipe for dinner?",
    "Thanks, that helps.",
    "Our team runs PostgreSQL 15 in production and we deploy on Fridays.",
    "Can you explain how generators work in Python?",
    "My dog Biscuit is afraid of thunderstorms.",
    "The meeting with Tomasz is on March 14 at 10am.",
)

_template: Path | None = None


def migrated_database() -> Path:
    """A fresh copy of one migrated SQLite file: migrating once per example would dominate the run."""
    global _template
    if _template is None:
        folder = Path(tempfile.mkdtemp(prefix="om-prop-"))
        _template = folder / "template.sqlite3"
        upgrade_to_head(f"sqlite:///{_template}")
    target = Path(tempfile.mkdtemp(prefix="om-prop-")) / "db.sqlite3"
    shutil.copy(_template, target)
    return target


class HeldTasks(WorkDispatcher):
    """Background work waits here until the test delivers it. Sync work is run by the reader itself."""

    runs_inline = True

    def __init__(self) -> None:
        self.queue: list[TaskRequest] = []
        self.delivered: list[TaskRequest] = []

    def dispatch(self, tasks: Sequence[TaskRequest]) -> None:
        self.queue.extend(t for t in tasks if t.queue != "om.sync")


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


GATEWAY = LiteLLMGateway()


class EngineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.path = migrated_database()
        self.tasks = HeldTasks()
        self.clock = Clock()
        self.deps = build_deps(
            database_url=f"sqlite:///{self.path}", dispatcher=self.tasks, profile=PROFILE, models=GATEWAY
        )
        self.deps.clock = self.clock
        self.deps.sync_wait_seconds = 0.0
        configure_thread(self.deps, tenant=TENANT, thread_id=THREAD)
        self.appended: list[str] = []
        self.last_user: str | None = None
        self.next_id = 0
        self.cursor = 0
        self.failure = "normal"

    def teardown(self) -> None:
        shutil.rmtree(self.path.parent, ignore_errors=True)

    # --- rules ------------------------------------------------------------------------------------------

    @rule(
        role=st.sampled_from(["user", "assistant"]),
        sentences=st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=12),
        minutes=st.integers(min_value=0, max_value=20),
    )
    def append(self, role: str, sentences: list[str], minutes: int) -> None:
        self.clock.now += timedelta(minutes=minutes)
        self._append([self._message(role, sentences)])

    @rule(
        turns=st.lists(
            st.lists(st.sampled_from(SENTENCES), min_size=4, max_size=8, unique=True), min_size=2, max_size=5
        )
    )
    def append_a_burst(self, turns: list[list[str]]) -> None:
        # many tokens in one request, while background work waits: a synchronous cycle can overtake it.
        # No sentence twice in a message: the local Observer would echo the loop, and fail as degenerate.
        roles = ("user", "assistant")
        self._append([self._message(roles[i % 2], sentences) for i, sentences in enumerate(turns)])

    @rule(
        role=st.sampled_from(["user", "user", "assistant"]),
        notes=st.integers(min_value=40, max_value=140),
    )
    def append_a_large_message(self, role: str, notes: int) -> None:
        # one message over messageTokens (400), often over blockAfter (600) too: a pasted document
        sentences = [f"Note {i}: {SENTENCES[i % len(SENTENCES)]}" for i in range(notes)]
        self._append([self._message(role, sentences)])

    def _message(self, role: str, sentences: list[str]) -> dict[str, Any]:
        message_id = f"m{self.next_id}"
        self.next_id += 1
        return {
            "id": message_id,
            "role": role,
            "parts": [{"type": "text", "text": " ".join(sentences)}],
            "createdAt": self.clock.now.isoformat(),
            **({"model": "openai/gpt-5-mini"} if role == "assistant" else {}),
        }

    def _append(self, messages: list[dict[str, Any]]) -> None:
        outcome = append_messages(self.deps, tenant=TENANT, thread_id=THREAD, messages=messages)
        ids = [m["id"] for m in messages]
        assert [a.message_id for a in outcome.appended] == ids
        self.appended.extend(ids)
        self.last_user = next((m["id"] for m in reversed(messages) if m["role"] == "user"), self.last_user)

    @rule()
    def resend_last_message(self) -> None:
        if not self.appended:
            return
        state = load_state(self.deps.records, self.deps.store, STREAM)
        stored = self.deps.messages.read_messages(STREAM, limit=1000)
        last = next(m for m in stored if m.message_id == self.appended[-1])
        outcome = append_messages(self.deps, tenant=TENANT, thread_id=THREAD, messages=[last.message])
        assert outcome.duplicates == [self.appended[-1]] and not outcome.appended
        assert load_state(self.deps.records, self.deps.store, STREAM).version == state.version

    @rule(mode=st.sampled_from(sorted(FAILURE_MODES)))
    def set_failure_mode(self, mode: str) -> None:
        self.failure = mode
        configure_thread(
            self.deps,
            tenant=TENANT,
            thread_id=THREAD,
            config={
                "observation": {"providerOptions": {"omLocal": FAILURE_MODES[mode]}},
                "reflection": {"providerOptions": {"omLocal": FAILURE_MODES[mode]}},
            },
        )

    @precondition(lambda self: bool(self.tasks.queue))
    @rule(data=st.data())
    def deliver_a_task(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(min_value=0, max_value=len(self.tasks.queue) - 1))
        task = self.tasks.queue.pop(index)
        run_task(self.deps, task.task_name, task.payload["stream_id"], task.payload["cycle_id"])
        self.tasks.delivered.append(task)

    @precondition(lambda self: bool(self.tasks.delivered))
    @rule(data=st.data())
    def deliver_a_task_again(self, data: st.DataObject) -> None:
        task = data.draw(st.sampled_from(self.tasks.delivered))
        before = load_state(self.deps.records, self.deps.store, STREAM)
        outcome = run_task(self.deps, task.task_name, task.payload["stream_id"], task.payload["cycle_id"])
        assert outcome in (WorkOutcome.DUPLICATE, WorkOutcome.STALE)
        after = load_state(self.deps.records, self.deps.store, STREAM)
        assert after.observed_seq == before.observed_seq and after.log == before.log
        assert after.chunks == before.chunks

    @rule(minutes=st.sampled_from([1, 6, 30]))
    def time_passes(self, minutes: int) -> None:
        self.clock.now += timedelta(minutes=minutes)

    @rule(wait=st.booleans())
    def read_context(self, wait: bool) -> None:
        try:
            window = get_context(
                self.deps, tenant=TENANT, thread_id=THREAD, caller_model="openai/gpt-5-mini", wait=wait
            )
        except ObservationFailedError:
            assert self.failure != "normal"
            return
        raw = [m["id"] for m in window.messages]
        if self.last_user is not None:
            # the turn's own question reaches the model verbatim, with everything after it
            assert self.last_user in raw, "the newest user message is not a raw message of the window"
            newest = self.appended.index(self.last_user)
            assert raw[-(len(self.appended) - newest) :] == self.appended[newest:]
        if not wait or self.failure != "normal":
            return
        state = load_state(self.deps.records, self.deps.store, STREAM)
        limits = policy.resolve_limits(record_config(self.deps.profile, state), state)
        assert limits.block_after is not None
        if window.pending_tokens >= limits.block_after:
            over = window.status["overBudget"]
            assert over is not None and over["reason"] == "newest_turn", (
                "a waited read returned a window over blockAfter"
            )
            assert window.warnings

    # --- invariants (semantics §8) ---------------------------------------------------------------------

    @invariant()
    def every_message_reaches_the_context_exactly_once(self) -> None:
        state = load_state(self.deps.records, self.deps.store, STREAM)
        window_ids = [m.message_id for m in state.window if m.kind == "message"]
        events = [from_recorded(r) for r in self.deps.store.read_stream(STREAM)]
        chunk_ids: dict[str, list[str]] = {}
        covered: list[str] = []
        for event in events:
            if isinstance(event, ObservationBufferCompleted) and event.observations.strip():
                chunk_ids[event.cycle_id] = event.message_ids
            elif isinstance(event, ChunksActivated):
                for cycle in event.cycle_ids:
                    covered.extend(chunk_ids[cycle])
            elif isinstance(event, SyncObservationCompleted):
                covered.extend(event.message_ids)
        assert sorted(covered + window_ids) == sorted(self.appended), "a message was lost or duplicated"
        assert [m.seq for m in state.window] == list(range(state.observed_seq + 1, state.next_seq))

    @invariant()
    def the_cursor_never_moves_backwards(self) -> None:
        state = load_state(self.deps.records, self.deps.store, STREAM)
        assert state.observed_seq >= self.cursor
        self.cursor = state.observed_seq
        if state.chunks:
            assert state.chunks[0].from_seq == state.observed_seq + 1
            for before, after in zip(state.chunks, state.chunks[1:], strict=False):
                assert after.from_seq == before.to_seq + 1

    @invariant()
    def every_start_is_closed_once(self) -> None:
        state = load_state(self.deps.records, self.deps.store, STREAM)
        events = [from_recorded(r) for r in self.deps.store.read_stream(STREAM)]
        closure = cycle_closure(events, record_config(self.deps.profile, state))
        assert not closure.closed_twice and not closure.started_twice and not closure.closed_unstarted
        # a start stays open exactly as long as its cycle is in flight: once settled, every start is closed
        in_flight = {
            f.cycle_id
            for f in (state.buffer_in_flight, state.sync_in_flight, state.reflection_in_flight)
            if f is not None
        }
        assert set(closure.unclosed) == in_flight, closure

    @invariant()
    def replay_reproduces_the_projection(self) -> None:
        stored = self.deps.records.load_snapshot(STREAM)
        assert stored is not None and stored.state is not None
        rebuilt = replay_state(self.deps.store, STREAM)
        assert stored.version == rebuilt.version
        expected = snapshot_of(rebuilt, "t").state
        assert isinstance(expected, str)
        assert canonical(json.loads(stored.state)) == canonical(json.loads(expected))
        # read back without any cache: the row plus the window's messages from the message projection
        uncached = load_state(self.deps.records, self.deps.store, STREAM)
        assert canonical(uncached.to_json()) == canonical(rebuilt.to_json())
        # the process's cached state (what the use cases started from) was never changed behind its back
        cached = load_state(self.deps.records, self.deps.store, STREAM, self.deps.states)
        assert cached.version == rebuilt.version
        assert canonical(cached.to_json()) == canonical(rebuilt.to_json())


EngineMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("OM_PROPERTY_EXAMPLES", "12")),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_engine_invariants = pytest.mark.slow(EngineMachine.TestCase)
