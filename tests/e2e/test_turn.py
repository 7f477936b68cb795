"""``POST /v1/threads/{id}/turn``: one request appends the turn's message and returns the context; the
Python clients' ``turn`` and ``append_in_background`` over a real uvicorn server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from om_api.client import AsyncOMClient, OMClient, OMError
from om_api.demo.conversation import synthetic_conversation
from om_api.schemas import OpenAITurnOut, TurnOut
from om_core.adapters.inline_dispatcher import InlineDispatcher
from om_core.application.deps import Deps
from om_core.application.projections import rebuild_projections
from om_core.application.streams import thread_stream_id
from testing.processes import serve_in_thread

from .conftest import AUTH_A, PROFILE, build


@pytest.fixture(scope="module")
def server(pg_url: str) -> Iterator[tuple[str, Deps, InlineDispatcher]]:
    app, deps, dispatcher = build(pg_url)
    try:
        with serve_in_thread(app, lifespan="on") as base:
            yield base, deps, dispatcher
    finally:
        dispatcher.close()


def test_a_turn_stores_what_an_append_then_a_read_stores(
    client: TestClient, pg_app: tuple[Any, Deps, Any]
) -> None:
    turns = list(synthetic_conversation(30, seed=3))
    limit = PROFILE["observation"]["messageTokens"] * PROFILE["observation"]["blockAfter"]
    for thread, one_request in (("turn-one", True), ("turn-two", False)):
        for turn in turns:
            if one_request:
                r = client.post(f"/v1/threads/{thread}/turn", json={"messages": [turn.user]}, headers=AUTH_A)
                assert r.status_code == 200, r.text
                body = r.json()
                assert TurnOut.model_validate(body).model_dump(mode="json") == body
                assert [a["message_id"] for a in body["appended"]] == [turn.user["id"]]
                assert body["parts"][-1]["type"] == "data-om-status"
                assert body["messages"][-1]["id"] == turn.user["id"], "the question is raw in the context"
                assert body["pending_tokens"] < limit
                assert "thisRead" in body["status"]
            else:
                client.post(f"/v1/threads/{thread}/messages", json={"messages": [turn.user]}, headers=AUTH_A)
                client.get(f"/v1/threads/{thread}/context", headers=AUTH_A)
            r = client.post(
                f"/v1/threads/{thread}/messages", json={"messages": [turn.assistant]}, headers=AUTH_A
            )
            assert r.status_code == 200, r.text
    # background work runs on its own thread here, so the two windows may differ in where the cursor is;
    # what is stored may not
    deps = pg_app[1]
    one, two = (
        [
            (m.message_id, {**m.message, "threadId": None})
            for m in deps.messages.read_messages(thread_stream_id("alpha", t), limit=100)
        ]
        for t in ("turn-one", "turn-two")
    )
    assert len(one) == 60 and one == two


def test_a_turn_in_openai_format_and_a_resent_message(client: TestClient) -> None:
    message = {"id": "q1", "role": "user", "content": "Where does my sister live?"}
    r = client.post(
        "/v1/threads/turn-oa/turn", params={"format": "openai"}, json={"messages": [message]}, headers=AUTH_A
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert OpenAITurnOut.model_validate(body).model_dump(mode="json") == body
    assert body["messages"][-1] == {"role": "user", "content": "Where does my sister live?"}
    again = client.post("/v1/threads/turn-oa/turn", json={"messages": [message]}, headers=AUTH_A).json()
    assert again["appended"] == [] and again["duplicates"] == ["q1"]
    assert again["version"] == body["version"]


def test_a_bad_turn_stores_nothing(client: TestClient) -> None:
    r = client.post("/v1/threads/turn-bad/turn", json={"messages": [{"role": "wizard"}]}, headers=AUTH_A)
    assert r.status_code == 422
    assert client.get("/v1/threads/turn-bad/context", headers=AUTH_A).status_code == 404


def test_the_clients_turn_and_background_replies_keep_the_order(
    server: tuple[str, Deps, InlineDispatcher],
) -> None:
    url, deps, dispatcher = server
    turns = list(synthetic_conversation(12, seed=9))
    with OMClient(url, "key-alpha") as om:
        for turn in turns:
            window = om.turn("turn-client", [turn.user], model="openai/gpt-5-mini")
            assert window["messages"][-1]["id"] == turn.user["id"]
            om.append_in_background("turn-client", [turn.assistant])
    expected = [m["id"] for turn in turns for m in (turn.user, turn.assistant)]
    stored = deps.messages.read_messages(thread_stream_id("alpha", "turn-client"), limit=1000)
    assert [m.message_id for m in stored] == expected

    async def drive() -> list[str]:
        async with AsyncOMClient(url, "key-alpha") as om:
            for turn in turns:
                window = await om.turn("turn-async", [turn.user])
                assert window["messages"][-1]["id"] == turn.user["id"]
                om.append_in_background("turn-async", [turn.assistant])
        return [
            m.message_id
            for m in deps.messages.read_messages(thread_stream_id("alpha", "turn-async"), limit=1000)
        ]

    assert asyncio.run(drive()) == expected
    # the Observer's background thread may still be committing: a fold read between its events and its
    # record row would compare two different versions
    dispatcher.drain()
    # every stream folds from its events to exactly its stored state
    assert rebuild_projections(deps.records, deps.store, verify_only=True).mismatched == []


def test_a_failed_background_append_surfaces_at_the_next_turn(
    server: tuple[str, Deps, InlineDispatcher],
) -> None:
    url, _, _ = server
    with OMClient(url, "key-alpha") as om:
        om.turn("turn-fail", [{"id": "u1", "role": "user", "content": "hello"}])
        om.append_in_background("turn-fail", [{"id": "u1", "role": "user", "content": "changed"}])
        with pytest.raises(OMError) as failed:
            om.turn("turn-fail", [{"id": "u2", "role": "user", "content": "again"}])
        assert failed.value.status == 409
