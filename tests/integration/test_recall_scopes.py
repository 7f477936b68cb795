"""Recall in both memory scopes, on both backends: what each call may read (``retrieval.scope``), stream
order, cursors resolved within the record's lineage, part filters and the reference's answer fields.

Two resources: ``res-1`` holds threads ``t1`` and ``t2``, ``res-2`` holds ``t3``. In thread scope each
thread is a stream of its own; in resource scope ``t1`` and ``t2`` append to one stream.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from om_core.application.append import append_messages, configure_thread
from om_core.application.configuration import counter_for
from om_core.application.deps import Deps
from om_core.application.recall import (
    OUTPUT_BUDGET_TOKENS,
    CursorAmbiguousError,
    CursorNotFoundError,
    RecallQuery,
    ThreadScopeError,
    recall,
)
from om_core.application.streams import RecordNotFoundError
from om_core.bootstrap import build_inline
from om_core.domain.config import parse_memory_config
from testing.postgres import scratch_postgres

BASE: dict[str, Any] = {"model": "om-local/extractive", "modelRetry": {"maxRetries": 0}}
AT = "2026-03-02T10:00:00Z"  # one moment for a whole append: only the stream orders it


def _user(message_id: str, text: str, at: str = AT) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": text, "createdAt": at}


TOOLS = {
    "id": "tools1",
    "role": "assistant",
    "createdAt": AT,
    "parts": [
        {"type": "text", "text": "Let me check the weather and the time."},
        {
            "type": "tool-invocation",
            "toolInvocation": {
                "toolCallId": "c1",
                "toolName": "weather",
                "state": "result",
                "args": {"city": "Lisbon"},
                "result": {"tempC": 21},
            },
        },
        {
            "type": "tool-invocation",
            "toolInvocation": {
                "toolCallId": "c2",
                "toolName": "clock",
                "state": "call",
                "args": {"tz": "UTC"},
            },
        },
    ],
}


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'om.sqlite3'}"
        return
    with scratch_postgres(prefix="om_test_recall_scopes") as url:
        yield url


def _deps(url: str, profile: dict[str, Any]) -> Iterator[Deps]:
    built, dispatcher = build_inline(database_url=url, profile=profile, migrate=url.startswith("sqlite"))
    yield built
    dispatcher.close()


def _fill(deps: Deps) -> None:
    configure_thread(deps, tenant="a", thread_id="t1", resource_id="res-1", title="First")
    # distinct creation times for the date filters
    time.sleep(0.05)
    configure_thread(deps, tenant="a", thread_id="t2", resource_id="res-1", title="Second")
    configure_thread(deps, tenant="a", thread_id="t3", resource_id="res-2", title="Elsewhere")
    # ids that do not sort as they were sent, all at one moment
    sent = [
        _user("m8", "The ferry to Cacilhas leaves every twenty minutes."),
        _user("m10", "My locker code is 4471."),
        _user("m9", "Dana prefers the window seat."),
    ]
    append_messages(deps, tenant="a", thread_id="t1", messages=[*sent, TOOLS])
    append_messages(
        deps,
        tenant="a",
        thread_id="t2",
        messages=[_user("n1", "The giraffe at the zoo is called Olu."), _user("n2", "Olu is eleven.")],
    )
    # the same id in another resource's thread: a cursor must find the one of the thread read
    append_messages(deps, tenant="a", thread_id="t1", messages=[_user("x1", "first resource marker")])
    append_messages(
        deps,
        tenant="a",
        thread_id="t3",
        messages=[_user("x1", "second resource marker"), _user("x2", "the albatross flies")],
    )


@pytest.fixture(params=["thread", "resource"])
def deps(request: pytest.FixtureRequest, backend: str) -> Iterator[Deps]:
    for built in _deps(backend, {**BASE, "scope": request.param}):
        _fill(built)
        yield built


@pytest.fixture(params=["thread", "resource"])
def narrow(request: pytest.FixtureRequest, backend: str) -> Iterator[Deps]:
    """The same threads with ``retrieval.scope: thread``: recall reads the calling thread only."""
    profile = {**BASE, "scope": request.param, "retrieval": {"scope": "thread"}}
    for built in _deps(backend, profile):
        _fill(built)
        yield built


def ask(deps: Deps, thread: str = "t1", **query: Any) -> dict[str, Any]:
    return recall(deps, tenant="a", thread_id=thread, query=RecallQuery(**query))


def ids(answer: dict[str, Any]) -> list[str]:
    return [m["id"] for m in answer["messages"]]


def test_messages_page_in_stream_order_with_the_reference_fields(deps: Deps) -> None:
    first = ask(deps, limit=3)
    assert ids(first) == ["m8", "m10", "m9"]
    assert (first["count"], first["truncated"], first["tokenOffset"]) == (3, False, 0)
    assert first["hasNextPage"] and not first["hasPrevPage"] and first["threadId"] == "t1"
    assert ids(ask(deps, cursor="m10", limit=2)) == ["m9", "tools1"]
    assert ids(ask(deps, cursor="m9", page=-1)) == ["m8", "m10"]
    assert ids(ask(deps, anchor="end", limit=2)) == ["tools1", "x1"]
    assert ids(ask(deps, cursor="m8", limit=2, page=2)) == ["tools1", "x1"]


def test_a_cursor_is_resolved_in_the_lineage_of_the_thread_read(deps: Deps) -> None:
    # x1 exists in t1 and in t3 (another resource): each thread reads its own
    assert ids(ask(deps, "t1", cursor="x1", page=-1, limit=1)) == ["tools1"]
    assert ids(ask(deps, "t3", cursor="x1")) == ["x2"]
    with pytest.raises(CursorNotFoundError):
        ask(deps, "t1", cursor="x2")  # t3's, of another resource
    with pytest.raises(CursorNotFoundError):
        ask(deps, "t3", cursor="m8")


def test_other_threads_of_the_resource_are_browsed_by_default(deps: Deps) -> None:
    other = ask(deps, "t1", thread_id="t2")
    assert ids(other) == ["n1", "n2"] and other["threadId"] == "t2"
    # a cursor of another thread of the resource browses that thread
    onward = ask(deps, "t1", cursor="n1")
    assert ids(onward) == ["n2"] and onward["threadId"] == "t2"
    assert ids(ask(deps, "t1", thread_id="current", limit=1)) == ["m8"]
    with pytest.raises(RecordNotFoundError):
        ask(deps, "t1", thread_id="t3")  # of another resource
    with pytest.raises(RecordNotFoundError):
        ask(deps, "t1", thread_id="nowhere")


def test_threads_mode_lists_the_resource_and_filters_on_creation(deps: Deps) -> None:
    listed = ask(deps, "t1", mode="threads")
    assert {t["id"] for t in listed["threads"]} == {"t1", "t2"}
    assert (listed["count"], listed["hasMore"], listed["page"]) == (2, False, 0)
    assert [t["label"] for t in listed["threads"] if t["current"]] == ["First ← current"]
    first, second = ask(deps, mode="threads", limit=1), ask(deps, mode="threads", limit=1, page=1)
    assert first["hasMore"] and not second["hasMore"] and first["count"] == second["count"] == 1
    assert {first["threads"][0]["id"], second["threads"][0]["id"]} == {"t1", "t2"}

    created = {t["id"]: datetime.fromisoformat(t["createdAt"]) for t in listed["threads"]}
    between = created["t1"] + (created["t2"] - created["t1"]) / 2
    assert [t["id"] for t in ask(deps, mode="threads", after=between)["threads"]] == ["t2"]
    assert [t["id"] for t in ask(deps, mode="threads", before=between)["threads"]] == ["t1"]
    # appending to t1 later changes when it was updated, not when it was created
    append_messages(deps, tenant="a", thread_id="t1", messages=[_user("late", "a late note")])
    assert [t["id"] for t in ask(deps, mode="threads", after=between)["threads"]] == ["t2"]


def test_search_covers_the_resource_by_default(deps: Deps) -> None:
    found = ask(deps, "t1", mode="search", query="giraffe")
    assert found["count"] == 1
    assert [(t["threadId"], t["current"], [r["cursor"] for r in t["results"]]) for t in found["threads"]] == [
        ("t2", False, ["n1"])
    ]
    assert ask(deps, "t1", mode="search", query="albatross")["count"] == 0  # another resource
    assert [t["threadId"] for t in ask(deps, "t3", mode="search", query="marker")["threads"]] == ["t3"]


def test_retrieval_scope_thread_keeps_recall_to_the_calling_thread(narrow: Deps) -> None:
    with pytest.raises(ThreadScopeError):
        ask(narrow, "t1", thread_id="t2")
    with pytest.raises(CursorNotFoundError):
        ask(narrow, "t1", cursor="n1")
    assert ids(ask(narrow, "t1", cursor="m9", limit=1)) == ["tools1"]
    listed = ask(narrow, "t1", mode="threads")
    assert [t["id"] for t in listed["threads"]] == ["t1"] and listed["count"] == 1
    assert ask(narrow, "t1", mode="search", query="giraffe")["count"] == 0
    assert ask(narrow, "t2", mode="search", query="giraffe")["count"] == 1


def test_part_filters_select_tool_calls_results_and_tools_by_name(deps: Deps) -> None:
    def parts(**query: Any) -> list[tuple[int, str]]:
        answer = ask(deps, cursor="m9", limit=1, **query)
        return [(p["partIndex"], p["text"]) for m in answer["messages"] for p in m["parts"]]

    calls = parts(part_type="tool-call")
    assert [i for i, _ in calls] == [1, 2]
    assert '"city": "Lisbon"' in calls[0][1] and "tempC" not in calls[0][1]
    results = parts(part_type="tool-result")
    assert [i for i, _ in results] == [1] and '"tempC": 21' in results[0][1] and "Lisbon" not in results[0][1]
    assert [i for i, _ in parts(tool_name="clock")] == [2]
    assert [i for i, _ in parts(part_type="tool-result", tool_name="clock")] == []
    assert [i for i, _ in parts(part_type="text")] == [0]
    # a message with nothing of the kind takes its page slot but is not shown
    assert ask(deps, limit=3, part_type="tool-call")["messages"] == []
    high = ask(deps, cursor="m9", limit=1, detail="high", part_type="tool-result")
    assert high["count"] == 1 and high["messages"][0]["parts"][0]["partIndex"] == 1


def test_an_answer_over_the_budget_is_cut_and_says_how_much(backend: str) -> None:
    for built in _deps(backend, {**BASE, "scope": "resource"}):
        long = " ".join(f"word{i}" for i in range(400))
        messages = [
            {
                "id": f"b{i}",
                "role": "assistant",
                "createdAt": AT,
                "parts": [{"type": "text", "text": long}] * 3,
            }
            for i in range(20)
        ]
        append_messages(built, tenant="a", thread_id="big", resource_id="res-big", messages=messages)
        answer = recall(built, tenant="a", thread_id="big", query=RecallQuery())
        assert answer["truncated"] is True and 0 < answer["count"] < 20
        count = counter_for(parse_memory_config(BASE)).count_text
        shown = sum(count(p["text"]) for m in answer["messages"] for p in m["parts"])
        # what is shown fits the budget; with what was cut it would not
        assert 0 < shown <= OUTPUT_BUDGET_TOKENS < shown + answer["tokenOffset"]


def test_an_id_in_two_threads_of_one_resource_names_both(backend: str) -> None:
    """Thread scope keeps each thread apart, so two threads of a resource may hold one id."""
    for built in _deps(backend, {**BASE, "scope": "thread"}):
        for thread in ("p", "q", "r"):
            configure_thread(built, tenant="a", thread_id=thread, resource_id="res-d")
        for thread in ("p", "q"):
            append_messages(
                built,
                tenant="a",
                thread_id=thread,
                messages=[_user("dup", f"said in {thread}"), _user(f"after-{thread}", "next")],
            )
        # the calling thread's own message wins; from a third thread the id is ambiguous
        assert ids(recall(built, tenant="a", thread_id="q", query=RecallQuery(cursor="dup"))) == ["after-q"]
        with pytest.raises(CursorAmbiguousError) as refused:
            recall(built, tenant="a", thread_id="r", query=RecallQuery(cursor="dup"))
        assert refused.value.details["threads"] == ["p", "q"]
        named = recall(built, tenant="a", thread_id="r", query=RecallQuery(cursor="dup", thread_id="p"))
        assert ids(named) == ["after-p"]
