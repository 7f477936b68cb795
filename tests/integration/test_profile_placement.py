"""Where a thread's record lives follows its profile, also when another process erased the thread and
created it again under a profile of another scope: a stale view of the thread never places a message in
the wrong record. Two processes are two sets of Deps over one database, each with its own state cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from om_core.application.append import append_messages, configure_thread
from om_core.application.context import get_context
from om_core.application.deps import Deps
from om_core.application.erase import erase_thread
from om_core.application.projections import rebuild_projections
from om_core.bootstrap import build_inline

DOCUMENT: dict[str, Any] = {
    "profiles": {
        "default": {"model": "om-local/extractive"},
        "support": {"model": "om-local/extractive", "scope": "resource"},
    }
}


def _two_processes(tmp_path: Path) -> tuple[Deps, Deps]:
    url = f"sqlite:///{tmp_path / 'om.sqlite3'}"
    return (
        build_inline(database_url=url, profile=DOCUMENT)[0],
        build_inline(database_url=url, profile=DOCUMENT, migrate=False)[0],
    )


def _say(deps: Deps, message_id: str, **kw: Any) -> None:
    append_messages(
        deps,
        tenant="a",
        thread_id="x",
        messages=[{"id": message_id, "role": "user", "content": message_id}],
        **kw,
    )


@pytest.mark.parametrize(("first", "then"), [("default", "support"), ("support", "default")])
def test_a_thread_created_again_under_another_scope_is_placed_by_what_it_is_now(
    tmp_path: Path, first: str, then: str
) -> None:
    one, two = _two_processes(tmp_path)
    configure_thread(one, tenant="a", thread_id="x", resource_id="u", profile=first)
    _say(one, "m1")
    assert [m["id"] for m in get_context(one, tenant="a", thread_id="x").messages] == ["m1"]
    # the other process erases the thread and creates it under a profile of the other scope
    erase_thread(two, tenant="a", thread_id="x")
    configure_thread(two, tenant="a", thread_id="x", resource_id="u", profile=then)
    # the first process still holds its old view of the thread
    _say(one, "m2")
    expected_stream = "a/resource@support/u" if then == "support" else "a/thread/x"
    for deps in (one, two):
        read = get_context(deps, tenant="a", thread_id="x")
        assert [m["id"] for m in read.messages] == ["m2"], "the message is in the thread's record of now"
        assert read.status["recordId"] == expected_stream
    assert rebuild_projections(one.records, one.store, verify_only=True).mismatched == []


def test_webhooks_follow_the_profile_a_record_runs_under(tmp_path: Path) -> None:
    hook = {
        "url": "http://127.0.0.1:9/hooks",
        "secret": "0123456789abcdef-secret",
        "events": ["buffering.start"],
    }
    small = {"model": "om-local/extractive", "observation": {"messageTokens": 300, "bufferTokens": 0.2}}
    document = {"profiles": {"default": small, "hooked": {**small, "webhooks": [hook]}}}
    deps, _ = build_inline(database_url=f"sqlite:///{tmp_path / 'om.sqlite3'}", profile=document)
    text = "We talked about the trains and the weather for a long time today. " * 8
    for thread, profile in (("plain", None), ("watched", "hooked")):
        for i in range(6):
            append_messages(
                deps,
                tenant="a",
                thread_id=thread,
                messages=[{"id": f"{thread}-{i}", "role": "user", "content": text}],
                profile=profile,
            )
    deliveries = [t for t in deps.outbox.fetch_unpublished_tasks(limit=1000) if t.queue == "om.webhooks"]
    assert deliveries, "the hooked profile's buffering starts are owed to its webhook"
    assert {t.stream_id for t in deliveries} == {"a/thread/watched"}
