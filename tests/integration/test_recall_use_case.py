"""The recall tool in process, on both backends: what a Python caller gets from the use case, without HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from om_core.application.append import append_messages
from om_core.application.deps import Deps
from om_core.application.recall import (
    CursorIsRangeError,
    CursorNotFoundError,
    QueryRequiredError,
    RecallQuery,
    recall,
)
from om_core.application.streams import RecordNotFoundError
from om_core.bootstrap import build_inline
from testing.postgres import scratch_postgres

PROFILE: dict[str, Any] = {"model": "om-local/extractive", "modelRetry": {"maxRetries": 0}}

NOTES = [
    "The quarterly budget review moved to Thursday.",
    "Remember that Dana prefers tea over coffee.",
    "The staging server runs on port 8443.",
    "The giraffe at the zoo is called Olu.",
    "Flights to Lisbon leave at nine in the morning.",
]


@pytest.fixture(params=["sqlite", "postgres"])
def deps(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deps]:
    if request.param == "sqlite":
        built, dispatcher = build_inline(database_url=f"sqlite:///{tmp_path / 'om.sqlite3'}", profile=PROFILE)
        yield built
        dispatcher.close()
        return
    with scratch_postgres(prefix="om_test_recall") as url:
        built, dispatcher = build_inline(database_url=url, profile=PROFILE, migrate=False)
        yield built
        dispatcher.close()


@pytest.fixture
def thread(deps: Deps) -> str:
    messages = [
        {"id": f"m{i}", "role": "user", "content": text, "createdAt": f"2026-03-02T10:00:0{i}Z"}
        for i, text in enumerate(NOTES, start=1)
    ]
    append_messages(deps, tenant="a", thread_id="t", messages=messages)
    return "t"


def ask(deps: Deps, **query: Any) -> dict[str, Any]:
    return recall(deps, tenant="a", thread_id="t", query=RecallQuery(**query))


def ids(answer: dict[str, Any]) -> list[str]:
    return [m["id"] for m in answer["messages"]]


def test_a_python_caller_pages_searches_and_lists_threads_in_process(deps: Deps, thread: str) -> None:
    first = ask(deps, limit=2)
    assert ids(first) == ["m1", "m2"] and first["hasNextPage"] and not first["hasPrevPage"]
    assert first["messages"][0]["parts"][0]["text"] == NOTES[0]
    onward = ask(deps, cursor="m2", limit=2)
    assert ids(onward) == ["m3", "m4"] and onward["hasPrevPage"]
    assert ids(ask(deps, cursor="m4", page=-1, limit=2)) == ["m2", "m3"]
    assert ids(ask(deps, anchor="end", limit=1)) == ["m5"]
    whole = ask(deps, cursor="m3", part_index=0)
    assert whole["messages"][0]["parts"][0]["text"] == NOTES[2]

    found = ask(deps, mode="search", query="giraffe")
    assert found["engine"] == "fulltext"
    assert [r["cursor"] for t in found["threads"] for r in t["results"]] == ["m4"]
    assert [t["id"] for t in ask(deps, mode="threads")["threads"]] == [thread]


def test_what_recall_refuses_is_a_typed_error_naming_what_to_pass(deps: Deps, thread: str) -> None:
    with pytest.raises(CursorIsRangeError) as refused:
        ask(deps, cursor="m1:m3")
    assert refused.value.details == {"cursor": "m1:m3", "hint": 'recall cursor="m1"'}
    with pytest.raises(CursorNotFoundError):
        ask(deps, cursor="m9")
    with pytest.raises(QueryRequiredError):
        ask(deps, mode="search", query="  ")
    with pytest.raises(RecordNotFoundError):
        # retrieval.scope resource (the default) reaches the resource's threads; "t" has no resource
        ask(deps, thread_id="another")
    with pytest.raises(RecordNotFoundError):
        recall(deps, tenant="a", thread_id="missing", query=RecallQuery())
    with pytest.raises(RecordNotFoundError):
        # another tenant's thread is no thread at all
        recall(deps, tenant="b", thread_id=thread, query=RecallQuery())
