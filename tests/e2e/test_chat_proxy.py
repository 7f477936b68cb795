"""The OpenAI-compatible proxy driven by the official ``openai`` package (sync, async, streaming, tool
calls) against a real ``om serve`` and a real ``om worker`` on Postgres and Redis.

A 200-message conversation through the proxy stores exactly what the explicit API stores for the same
turns; the model's prompt holds om's observations once the early turns left the window; an app that
resends the history, or retries a request, never stores a message twice and gets the stored reply.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import redis

from om_api.demo.conversation import synthetic_conversation
from om_core.application.chat import derive_message_id, signature
from testing.conversations import memory_profile
from testing.postgres import scratch_postgres
from testing.processes import om_server, om_worker_process, process_env, suite_redis_url

pytestmark = pytest.mark.integration

REDIS_URL = suite_redis_url("OM_TEST_REDIS_URL_CHAT", 12)
PROXY_KEY, EXPLICIT_KEY = "proxy-key", "explicit-key"
MODEL = "om-local/chat"
SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("chat-proxy")
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    client.close()
    profile = tmp / "profile.json"
    profile.write_text(json.dumps(memory_profile()))
    with scratch_postgres(prefix="om_chat") as url:
        env = process_env(
            database_url=url,
            broker_url=REDIS_URL,
            profile=profile,
            extra={"OM_API_KEYS": f"{PROXY_KEY}=proxy,{EXPLICIT_KEY}=explicit"},
        )
        worker = om_worker_process("chat-worker", env, tmp).start()
        try:
            with om_server(["serve"], env, tmp / "serve.log") as base:
                yield base
        finally:
            worker.stop()


def events(base: str, key: str, thread: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    after = 0
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        while True:
            page = http.get(
                f"/v1/threads/{thread}/events",
                params={"after": after, "limit": 1000, "types": "MessageAppended"},
            ).json()
            found += [e["data"] for e in page["events"]]
            if page["next_after"] is None or not page["events"]:
                return found
            after = page["next_after"]


def comparable(event: dict[str, Any]) -> dict[str, Any]:
    """A stored message as both paths store it: its times (server clock) and the hash over them left out."""
    message = {k: v for k, v in event["message"].items() if k != "createdAt"}
    return {**{k: v for k, v in event.items() if k not in ("created_at", "content_hash")}, "message": message}


def test_a_long_conversation_through_the_proxy_stores_what_the_explicit_api_stores(server: str) -> None:
    thread = "long-chat"
    client = openai.OpenAI(base_url=f"{server}/v1", api_key=PROXY_KEY, max_retries=0, timeout=60)
    assert MODEL in [m.id for m in client.models.list()]
    history: list[Any] = [SYSTEM]
    turns = list(synthetic_conversation(100, seed=5))
    replies: list[str] = []
    for turn in turns:
        history.append({"role": "user", "content": turn.user["parts"][0]["text"]})
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=history, extra_headers={"X-OM-Thread-Id": thread}
        )
        # the app resends the whole history every call, yet only its new message is stored
        assert raw.headers["x-om-appended"] == "1"
        completion = raw.parse()
        message = completion.choices[0].message
        assert message.content is not None and message.content.startswith('You said: "')
        replies.append(message.content)
        # as apps do: the SDK's own message object goes back into the history
        history.append(message)

    proxied = events(server, PROXY_KEY, thread)
    assert len(proxied) == 200
    assert len({e["message_id"] for e in proxied}) == 200

    # the same turns through the explicit API, as an app that calls its model itself would send them
    with httpx.Client(
        base_url=server, headers={"Authorization": f"Bearer {EXPLICIT_KEY}"}, timeout=60
    ) as http:
        previous = ""
        for turn, reply in zip(turns, replies, strict=True):
            for raw_message in (
                {"role": "user", "content": turn.user["parts"][0]["text"]},
                {"role": "assistant", "content": reply, "model": MODEL},
            ):
                previous = derive_message_id(thread, previous, signature(raw_message))
                sent = http.post(
                    f"/v1/threads/{thread}/messages", json={"messages": [{**raw_message, "id": previous}]}
                )
                assert sent.status_code == 200, sent.text
                if raw_message["role"] == "user":
                    assert (
                        http.get(f"/v1/threads/{thread}/context", params={"model": MODEL}).status_code == 200
                    )
    explicit = events(server, EXPLICIT_KEY, thread)
    assert [comparable(e) for e in proxied] == [comparable(e) for e in explicit]

    # retried (the app lost the answer and sends the same request again): nothing is stored again and the
    # model is not called; the answer is the stored reply (tests/e2e/test_chat_retries.py has the rest)
    retried = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=history[:-1], extra_headers={"X-OM-Thread-Id": thread}
    )
    assert retried.headers["x-om-appended"] == "0"
    assert retried.headers["idempotent-replayed"] == "true"
    assert retried.parse().choices[0].message.content == replies[-1]
    assert len(events(server, PROXY_KEY, thread)) == 200

    # memory: the planted fact left the window long ago, and the model still sees it in the observations
    history.append({"role": "user", "content": "Where does my sister Priya live?"})
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=history, extra_headers={"X-OM-Thread-Id": thread}
    )
    assert int(raw.headers["x-om-observation-tokens"]) > 0
    answer = raw.parse().choices[0].message.content or ""
    remembered = answer.partition("I remember: ")[2]
    assert "Priya" in remembered and "Lisbon" in remembered, answer
    with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {PROXY_KEY}"}) as http:
        window = http.get(f"/v1/threads/{thread}/context", params={"format": "openai"}).json()["messages"]
    assert not any("Lisbon" in json.dumps(m) for m in window if m["role"] == "user")


def test_async_streaming_with_tool_calls_from_an_app_that_sends_only_new_messages(server: str) -> None:
    thread = "tools-chat"

    async def conversation() -> list[str]:
        client = openai.AsyncOpenAI(base_url=f"{server}/v1", api_key=PROXY_KEY, max_retries=0, timeout=60)
        headers = {"X-OM-Thread-Id": thread}
        asked = {"role": "user", "content": 'Please call get_weather {"city": "Paris"}'}
        stream = await client.chat.completions.create(
            model=MODEL, messages=[SYSTEM, asked], tools=TOOLS, stream=True, extra_headers=headers
        )
        call: dict[str, Any] = {"id": None, "name": "", "arguments": ""}
        finish = None
        async for chunk in stream:
            for choice in chunk.choices:
                for piece in choice.delta.tool_calls or []:
                    call["id"] = piece.id or call["id"]
                    call["name"] += (piece.function and piece.function.name) or ""
                    call["arguments"] += (piece.function and piece.function.arguments) or ""
                finish = choice.finish_reason or finish
        assert finish == "tool_calls" and call["name"] == "get_weather"
        assert json.loads(call["arguments"]) == {"city": "Paris"}
        # only what is new since the last call: the tool's result (the model's call is om's already)
        result = {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21 °C"}
        stream = await client.chat.completions.create(
            model=MODEL, messages=[SYSTEM, result], tools=TOOLS, stream=True, extra_headers=headers
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text == "Tool result: sunny, 21 °C"
        # then the whole history at once, the app having changed its mind about what to send
        whole = [
            SYSTEM,
            asked,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["name"], "arguments": call["arguments"]},
                    }
                ],
            },
            result,
            {"role": "assistant", "content": text},
            {"role": "user", "content": "Thanks!"},
        ]
        raw = await client.chat.completions.with_raw_response.create(
            model=MODEL, messages=whole, metadata={"om_thread_id": thread}
        )
        assert raw.headers["x-om-appended"] == "1"
        return [e["role"] for e in events(server, PROXY_KEY, thread)]

    roles = asyncio.run(conversation())
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]


def test_sync_streaming_and_errors_in_openai_shape(server: str) -> None:
    client = openai.OpenAI(base_url=f"{server}/v1", api_key=PROXY_KEY, max_retries=0, timeout=60)
    headers = {"X-OM-Thread-Id": "stream-chat"}
    first = {"role": "user", "content": "Hello there"}
    with client.chat.completions.with_streaming_response.create(
        model=MODEL, messages=[first], stream=True, extra_headers=headers
    ) as response:
        assert response.headers["x-om-thread-id"] == "stream-chat"
        text = "".join(c.choices[0].delta.content or "" for c in response.parse() if c.choices)
    assert text.startswith('You said: "Hello there".')
    assert [e["role"] for e in events(server, PROXY_KEY, "stream-chat")] == ["user", "assistant"]

    with pytest.raises(openai.BadRequestError) as missing:
        client.chat.completions.create(model=MODEL, messages=[first])
    assert missing.value.code == "missing_thread_id"
    assert isinstance(missing.value.body, dict) and missing.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="openai/gpt-none", messages=[first], extra_headers=headers)
    assert unknown.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=MODEL, messages=[first], extra_headers=headers, extra_body={"api_base": "http://x"}
        )
    assert refused.value.code == "unknown_parameter"
    with pytest.raises(openai.BadRequestError) as forwarded:
        client.chat.completions.create(
            model=MODEL, messages=[first], extra_headers={**headers, "X-OM-Provider-Key": "sk-x"}
        )
    assert forwarded.value.code == "provider_key_not_forwarded"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{server}/v1", api_key="wrong", max_retries=0).models.list()


def test_models_lists_what_the_profile_offers(server: str, tmp_path: Path) -> None:
    listed = httpx.get(f"{server}/v1/models", headers={"Authorization": f"Bearer {PROXY_KEY}"}).json()
    # the profile's only model is the local extractive Observer, which is no chat model
    assert listed == {
        "object": "list",
        "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "om-local"}],
    }
