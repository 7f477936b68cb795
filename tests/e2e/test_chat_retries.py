"""A request through the OpenAI-compatible proxy is answered once, however often the ``openai`` package
sends it (docs/api.md, Retries and regeneration): a response lost after the reply was stored, a client
timeout while the model still answers, streamed or whole, with or without an ``Idempotency-Key``. The
provider behind the proxy counts its calls; a real ``om serve`` on Postgres (its embedded worker observes).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from testing.chat_provider import ChatProvider
from testing.conversations import memory_profile
from testing.postgres import scratch_postgres
from testing.processes import om_server, process_env

pytestmark = pytest.mark.integration

KEY = "retry-key"
MODEL = "openai/counting-model"


@pytest.fixture(scope="module")
def provider() -> Iterator[ChatProvider]:
    made = ChatProvider().start()
    yield made
    made.stop()


@pytest.fixture(scope="module")
def server(provider: ChatProvider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("chat-retries")
    profile = tmp / "profile.json"
    profile.write_text(json.dumps(memory_profile()))
    with scratch_postgres(prefix="om_chat_retries") as url:
        env = process_env(
            database_url=url,
            broker_url="memory://",
            profile=profile,
            extra={
                "OM_API_KEYS": f"{KEY}=retries",
                "OM_CHAT_MODELS": MODEL,
                "OPENAI_BASE_URL": provider.base_url,
                "OPENAI_API_KEY": "sk-test-provider-on-loopback",
            },
        )
        with om_server(["serve"], env, tmp / "serve.log") as base:
            yield base


class LosesFirstResponse(httpx.BaseTransport):
    """The network between the app and om: the first completion reaches om, whose answer is then lost
    (the connection drops), so the client retries."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.lost = 0
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.url.path.endswith("/chat/completions"):
            self.sent += 1
            if self.lost == 0:
                response.read()
                response.close()
                self.lost += 1
                raise httpx.RemoteProtocolError(
                    "connection dropped before the answer arrived", request=request
                )
        return response


def _stored(server: str, thread: str) -> list[dict[str, Any]]:
    with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as http:
        page = http.get(f"/v1/threads/{thread}/events", params={"types": "MessageAppended", "limit": 1000})
        if page.status_code == 404:
            return []
        assert page.status_code == 200, page.text
        return [e["data"] for e in page.json()["events"]]


def _client(server: str, **options: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server}/v1", api_key=KEY, max_retries=2, **options)


def _history(thread: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": f"Hello from {thread}"},
        {"role": "assistant", "content": "Hi! How can I help?"},
        {"role": "user", "content": "Book the 07:05 to Amsterdam, please."},
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_lost_response_retried_by_the_client_is_answered_from_the_stored_reply(
    server: str, provider: ChatProvider, stream: bool
) -> None:
    thread = f"lost-response-{'streamed' if stream else 'whole'}"
    network = LosesFirstResponse()
    client = _client(server, http_client=httpx.Client(transport=network, timeout=30))
    before = provider.call_count()
    completion = client.chat.completions.create(
        model=MODEL, messages=_history(thread), stream=stream, extra_headers={"X-OM-Thread-Id": thread}
    )
    text = (
        "".join(c.choices[0].delta.content or "" for c in completion if c.choices)  # type: ignore[union-attr]
        if stream
        else completion.choices[0].message.content  # type: ignore[union-attr]
    )
    assert network.lost == 1 and network.sent == 2, "the client sent the request twice"
    assert provider.call_count() - before == 1, "the model was called once"
    stored = _stored(server, thread)
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
    assert text == stored[-1]["message"]["parts"][0]["text"]


def test_a_client_that_times_out_while_the_model_answers_gets_that_answer_on_its_retry(
    server: str, provider: ChatProvider
) -> None:
    thread = "timed-out"
    # the model takes longer than the client waits: its first attempt always times out
    provider.delay_s = 3.0
    try:
        client = _client(server, timeout=2.0)
        before = provider.call_count()
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=_history(thread), extra_headers={"X-OM-Thread-Id": thread}
        )
    finally:
        provider.delay_s = 0.0
    assert raw.headers["idempotent-replayed"] == "true"
    assert provider.call_count() - before == 1, "the model was called once"
    stored = _stored(server, thread)
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
    assert raw.parse().choices[0].message.content == stored[-1]["message"]["parts"][0]["text"]


def test_an_idempotency_key_answers_every_repeat_and_refuses_another_request(
    server: str, provider: ChatProvider
) -> None:
    thread = "keyed"
    client = _client(server)
    # an app that sends only its new message: without a key, the same words again are a new message
    client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Shall we book it?"}],
        extra_headers={"X-OM-Thread-Id": thread},
    )
    asked = [{"role": "user", "content": "yes"}]
    headers = {"X-OM-Thread-Id": thread, "Idempotency-Key": "turn-1"}
    before = provider.call_count()
    first = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=asked, extra_headers=headers
    )
    again = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=asked, extra_headers=headers
    )
    assert provider.call_count() - before == 1
    assert "idempotent-replayed" not in first.headers and again.headers["idempotent-replayed"] == "true"
    assert again.headers["x-om-appended"] == "0"
    assert again.parse().choices[0].message.content == first.parse().choices[0].message.content
    # the same key on a request that brings a new message is another request
    with pytest.raises(openai.ConflictError) as reused:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "and a taxi"}], extra_headers=headers
        )
    assert reused.value.code == "idempotency_key_reused"
    assert [m["role"] for m in _stored(server, thread)] == ["user", "assistant"] * 2
    # a new key is a new request: the same words count again
    client.chat.completions.create(
        model=MODEL, messages=asked, extra_headers={**headers, "Idempotency-Key": "turn-2"}
    )
    assert [m["role"] for m in _stored(server, thread)] == ["user", "assistant"] * 3


def test_a_regeneration_is_asked_for_explicitly(server: str, provider: ChatProvider) -> None:
    thread = "regenerated"
    client = _client(server)
    headers = {"X-OM-Thread-Id": thread}
    first = client.chat.completions.create(model=MODEL, messages=_history(thread), extra_headers=headers)
    resent = client.chat.completions.create(model=MODEL, messages=_history(thread), extra_headers=headers)
    assert resent.choices[0].message.content == first.choices[0].message.content
    before = provider.call_count()
    other = client.chat.completions.create(
        model=MODEL, messages=_history(thread), extra_headers={**headers, "X-OM-Regenerate": "true"}
    )
    assert provider.call_count() - before == 1
    assert other.choices[0].message.content != first.choices[0].message.content
    roles = [m["role"] for m in _stored(server, thread)]
    assert roles == ["user", "assistant", "user", "assistant", "assistant"]


def test_concurrent_duplicates_call_the_model_once(server: str, provider: ChatProvider) -> None:
    thread = "concurrent"
    provider.delay_s = 1.0
    answers: list[str] = []
    try:

        def send() -> None:
            completion = _client(server, timeout=30).chat.completions.create(
                model=MODEL, messages=_history(thread), extra_headers={"X-OM-Thread-Id": thread}
            )
            answers.append(completion.choices[0].message.content or "")

        before = provider.call_count()
        senders = [threading.Thread(target=send) for _ in range(3)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
    finally:
        provider.delay_s = 0.0
    assert provider.call_count() - before == 1
    assert len(set(answers)) == 1 and len(answers) == 3
    assert [m["role"] for m in _stored(server, thread)] == ["user", "assistant", "user", "assistant"]


def test_a_bad_idempotency_key_and_a_nested_body_are_refused_in_openai_shape(
    server: str, tmp_path: Path
) -> None:
    client = _client(server)
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"X-OM-Thread-Id": "bad", "Idempotency-Key": "has spaces"},
        )
    assert bad.value.code == "invalid_idempotency_key"
    nested = b'{"model": "x", "messages": [{"role": "user", "content": ' + b"[" * 5000 + b"]" * 5000 + b"}]}"
    not_json = b'{"model": "x", "temperature": NaN, "messages": [{"role": "user", "content": "hi"}]}'
    for body, said in ((nested, "levels deep"), (not_json, "NaN")):
        answer = httpx.post(
            f"{server}/v1/chat/completions",
            content=body,
            headers={
                "Authorization": f"Bearer {KEY}",
                "content-type": "application/json",
                "X-OM-Thread-Id": "bad",
            },
        )
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert error["code"] == "invalid_body" and error["type"] == "invalid_request_error"
        assert said in error["message"]
    assert _stored(server, "bad") == []
