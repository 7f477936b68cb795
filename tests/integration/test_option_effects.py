"""Options that used to be accepted without effect, each shown acting end to end (SQLite, local model):
provider-aware image counts, ``enabled: false`` and the ``observationalMemory`` wrapper, the caller's
``promptCacheRetention`` for an ``"auto"`` idle TTL, and a model list falling back over HTTP-free calls."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from om_core.adapters.models.litellm_gateway import LiteLLMGateway, RetryPolicy
from om_core.application.append import append_messages
from om_core.application.context import read_context
from om_core.application.deps import Deps
from om_core.application.observer import _settings
from om_core.application.ports import ModelRequest, TransientModelError
from om_core.application.repository import load_state
from om_core.application.streams import thread_stream_id
from om_core.bootstrap import build_inline
from om_core.domain.config import parse_memory_config
from om_core.domain.prompts import OBSERVER_HISTORY_HEADING, TRANSCRIPT_END_MARKER

IMAGE = {"type": "image", "url": "https://x.test/board.png", "width": 2048, "height": 1024}
FILLER = "Tell me more about the weather and the news today, please, in some detail."


def inline(tmp_path: Path, profile: dict[str, Any]) -> Deps:
    deps, _ = build_inline(database_url=f"sqlite:///{tmp_path / 'om.sqlite3'}", profile=profile)
    return deps


def image_message(message_id: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": [IMAGE]}


@pytest.mark.parametrize(
    ("model", "tokens"),
    [
        (None, 1_110),  # no model known and a local Observer: OpenAI's prices, as Mastra without a model
        ("openai/gpt-4o", 1_110),
        ("anthropic/claude-sonnet-4-5", 1_645),
        ("google/gemini-2.5-flash", 1_553),
    ],
)
def test_an_image_is_counted_for_the_callers_provider(tmp_path: Path, model: str | None, tokens: int) -> None:
    deps = inline(tmp_path, {"model": "om-local/extractive", "tokenizer": "tokenx"})
    outcome = append_messages(
        deps, tenant="a", thread_id="t", messages=[image_message("m1")], caller_model=model
    )
    assert [a.tokens for a in outcome.appended] == [tokens]


def test_without_a_caller_model_the_threads_last_assistant_model_prices_the_image(tmp_path: Path) -> None:
    deps = inline(tmp_path, {"model": "om-local/extractive", "tokenizer": "tokenx"})
    assistant = {"id": "a1", "role": "assistant", "content": "Hello", "model": "anthropic/claude-sonnet-4-5"}
    append_messages(deps, tenant="a", thread_id="t", messages=[assistant])
    outcome = append_messages(deps, tenant="a", thread_id="t", messages=[image_message("m2")])
    assert [a.tokens for a in outcome.appended] == [1_645]


@pytest.mark.parametrize(
    ("model", "tokens"), [("google/gemini-2.5-flash", 1_553), ("anthropic/claude-sonnet-4-5", 1_645)]
)
def test_with_no_model_known_the_profiles_observer_provider_prices_the_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, tokens: int
) -> None:
    # the profile's models need their keys at start-up; one message calls no model
    monkeypatch.setenv("GEMINI_API_KEY", "unused")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    deps = inline(tmp_path, {"model": model, "tokenizer": "tokenx"})
    outcome = append_messages(deps, tenant="a", thread_id="t", messages=[image_message("m1")])
    assert [a.tokens for a in outcome.appended] == [tokens]


@pytest.mark.parametrize(
    "profile",
    [
        {"enabled": False, "model": "om-local/extractive", "observation": {"messageTokens": 200}},
        {"observationalMemory": False},
    ],
)
def test_enabled_false_observes_nothing_and_the_context_is_the_raw_messages(
    tmp_path: Path, profile: dict[str, Any]
) -> None:
    deps = inline(tmp_path, profile)
    for i in range(40):
        append_messages(
            deps, tenant="a", thread_id="t", messages=[{"id": f"m{i}", "role": "user", "content": FILLER}]
        )
    read = read_context(deps, tenant="a", thread_id="t")
    state = load_state(deps.records, deps.store, thread_stream_id("a", "t"))
    assert state.stats.observer_calls == 0 and not state.chunks and not state.log
    assert [json.loads(m)["id"] for m in read.window.message_json] == [f"m{i}" for i in range(40)]
    assert read.window.system == [] and read.window.warnings == []
    assert read.window.status["overBudget"] is None


def test_the_observational_memory_wrapper_reads_as_its_options() -> None:
    assert parse_memory_config({"observationalMemory": True}) == parse_memory_config({})
    assert parse_memory_config({"observationalMemory": False}).enabled is False
    wrapped = parse_memory_config({"observationalMemory": {"scope": "resource"}})
    assert wrapped == parse_memory_config({"scope": "resource"})


def _buffered_thread(tmp_path: Path) -> Deps:
    """A thread with a buffered chunk waiting below the threshold, its assistant idle for ten minutes."""
    deps = inline(
        tmp_path,
        {
            "model": "om-local/extractive",
            "activateAfterIdle": "auto",
            "observation": {"messageTokens": 2_000, "bufferTokens": 200},
        },
    )
    idle_since = datetime.now(UTC) - timedelta(minutes=10)
    for i in range(12):
        at = (idle_since - timedelta(minutes=30 - i)).isoformat()
        message = {"id": f"m{i}", "role": "user", "content": FILLER, "createdAt": at}
        append_messages(deps, tenant="a", thread_id="t", messages=[message])
    # its model keeps a prompt cache an hour, so appending does not activate anything
    assistant = {
        "id": "a1",
        "role": "assistant",
        "content": "Noted.",
        "createdAt": idle_since.isoformat(),
        "model": "openai/gpt-5.5",
    }
    append_messages(deps, tenant="a", thread_id="t", messages=[assistant])
    assert load_state(deps.records, deps.store, thread_stream_id("a", "t")).chunks
    return deps


def test_auto_idle_ttl_follows_the_callers_prompt_cache_retention(tmp_path: Path) -> None:
    deps = _buffered_thread(tmp_path)
    stream = thread_stream_id("a", "t")
    # gpt-5.5 keeps its cache an hour: ten idle minutes are not enough
    read_context(deps, tenant="a", thread_id="t", caller_model="openai/gpt-5.5")
    assert load_state(deps.records, deps.store, stream).chunks
    # the caller says its cache is in memory only (5 minutes): the chunks activate
    read_context(
        deps,
        tenant="a",
        thread_id="t",
        caller_model="openai/gpt-5.5",
        caller_provider_options={"openai": {"promptCacheRetention": "in_memory"}},
    )
    state = load_state(deps.records, deps.store, stream)
    assert not state.chunks and state.log


def test_prompt_cache_retention_on_the_context_read_over_http(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from om_api.app import create_app
    from om_core.settings import ServerSettings

    deps = _buffered_thread(tmp_path)
    settings = ServerSettings(database_url=f"sqlite:///{tmp_path / 'om.sqlite3'}", api_keys="k=a")
    key = {"Authorization": "Bearer k"}
    with TestClient(create_app(settings, deps)) as client:
        refused = client.get("/v1/threads/t/context", params={"prompt_cache_retention": "1w"}, headers=key)
        assert refused.status_code == 422
        answer = client.get(
            "/v1/threads/t/context",
            params={"model": "openai/gpt-5.5", "prompt_cache_retention": "in_memory"},
            headers=key,
        )
        assert answer.status_code == 200
    assert not load_state(deps.records, deps.store, thread_stream_id("a", "t")).chunks


# --- a model list with retries ----------------------------------------------------------------------------


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def observer_request(config: dict[str, Any], **om_local: object) -> ModelRequest:
    memory = parse_memory_config(config)
    return ModelRequest(
        model="unused",
        messages=[
            {"role": "system", "content": "You are the Observer."},
            {
                "role": "user",
                "content": f"{OBSERVER_HISTORY_HEADING}\n\nJan 5 2026:\nUser (2:30 PM): My name is Priya "
                f"and I live in Lisbon.\n\n{TRANSCRIPT_END_MARKER}",
            },
        ],
        purpose="observer",
        settings=_settings(memory, "observer"),
        provider_options={"omLocal": dict(om_local)},
    )


def test_a_model_list_falls_back_to_the_next_model_after_its_retries() -> None:
    sleeps = Sleeps()
    gateway = LiteLLMGateway(RetryPolicy(max_retries=9), sleep=sleeps, environ={})
    # the first model cannot be called without its key, the second refuses chat calls, the third answers
    config = {
        "model": [
            {"model": "openai/gpt-5-mini", "maxRetries": 3},
            {"model": "om-local/hashing", "maxRetries": 2},
            {"model": "om-local/chat", "enabled": False},
            {"model": "om-local/extractive"},
        ]
    }
    request = observer_request(config)
    response = gateway.complete(ModelRequest(**{**_fields(request), "model": "openai/gpt-5-mini"}))
    assert response.model == "om-local/extractive"
    # one refused (permanent) attempt at om-local/hashing, one good one; no key means no attempt at all
    assert response.attempts == 2 and sleeps.delays == []


def test_each_model_of_the_list_retries_with_its_own_bound() -> None:
    sleeps = Sleeps()
    gateway = LiteLLMGateway(RetryPolicy(max_retries=9, initial_delay_s=0.0), sleep=sleeps, environ={})
    config = {
        "model": [{"model": "om-local/extractive", "maxRetries": 2}, {"model": "default", "maxRetries": 0}]
    }
    request = observer_request(config, errorRate=1.0)
    assert request.settings["max_retries"] == 2
    assert request.settings["fallbacks"] == [{"model": "google/gemini-2.5-flash", "maxRetries": 0}]
    # every attempt at the local model fails transiently: three attempts, then the Google model, whose key
    # is not set, ends the route with the local model's error and the attempts of the whole route
    with pytest.raises(Exception) as caught:
        gateway.complete(ModelRequest(**{**_fields(request), "model": "om-local/extractive"}))
    assert "GEMINI_API_KEY" in str(caught.value) or "GOOGLE" in str(caught.value).upper()
    assert len(sleeps.delays) == 2
    only_local = observer_request(
        {"model": [{"model": "om-local/extractive", "maxRetries": 1}]}, errorRate=1.0
    )
    with pytest.raises(TransientModelError) as transient:
        gateway.complete(ModelRequest(**{**_fields(only_local), "model": "om-local/extractive"}))
    assert transient.value.attempts == 2


def _fields(request: ModelRequest) -> dict[str, Any]:
    return {name: getattr(request, name) for name in ModelRequest.__dataclass_fields__}
