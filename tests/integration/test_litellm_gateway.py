"""Real litellm calls through the gateway to the local provider: no network, no keys."""

import time

import pytest

from om_core.adapters.models.litellm_gateway import (
    LiteLLMGateway,
    RetryPolicy,
    completion_kwargs,
    is_transient,
    load_litellm,
)
from om_core.adapters.models.om_local import DEGENERATE_OUTPUT, EMPTY_OBSERVATIONS
from om_core.application.ports import (
    ModelConfigurationError,
    ModelRequest,
    PermanentModelError,
    TransientModelError,
)
from om_core.domain.prompts import OBSERVER_HISTORY_HEADING, TRANSCRIPT_END_MARKER

TRANSCRIPT = """Jan 5 2026:
User (2:30 PM): My name is Priya Raman and I live in Lisbon.
Assistant: Nice to meet you, Priya!
User (2:31 PM): Can you book a table for 4 at Nobu tomorrow?"""

MESSAGES = [
    {"role": "system", "content": "You are the Observer."},
    {"role": "user", "content": f"{OBSERVER_HISTORY_HEADING}\n\n{TRANSCRIPT}\n\n{TRANSCRIPT_END_MARKER}"},
]


def observer_request(**om_local: object) -> ModelRequest:
    return ModelRequest(
        model="om-local/extractive",
        messages=MESSAGES,
        purpose="observation",
        settings={"temperature": 0.3, "maxOutputTokens": 2_000},
        provider_options={"omLocal": dict(om_local), "google": {"thinkingConfig": {"thinkingBudget": 0}}},
    )


class RecordingSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
def sleeps() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
def gateway(sleeps: RecordingSleep) -> LiteLLMGateway:
    return LiteLLMGateway(
        RetryPolicy(max_retries=3, initial_delay_s=1.0, max_delay_s=3.0), sleep=sleeps, environ={}
    )


def test_local_model_writes_observations_with_usage_and_zero_cost(gateway: LiteLLMGateway) -> None:
    response = gateway.complete(observer_request(seed=1))
    assert "* 🔴 (14:30) User's name is Priya Raman and user lives in Lisbon" in response.text
    assert "User asked: book a table for 4 at Nobu tomorrow (meaning Jan 6, 2026)" in response.text
    assert response.model == "om-local/extractive"
    assert response.usage.input_tokens > 20 and response.usage.output_tokens > 20
    assert response.usage.cost_usd == 0.0
    assert response.attempts == 1 and response.latency_ms > 0


def test_persistent_transient_errors_are_retried_then_reported(
    gateway: LiteLLMGateway, sleeps: RecordingSleep
) -> None:
    with pytest.raises(TransientModelError) as excinfo:
        gateway.complete(observer_request(errorRate=1.0))
    assert excinfo.value.attempts == 4
    assert excinfo.value.model == "om-local/extractive"
    assert len(sleeps.delays) == 3
    # 1 s, 2 s, then capped at 3 s, each within ±20 % jitter.
    for delay, base in zip(sleeps.delays, [1.0, 2.0, 3.0], strict=True):
        assert base * 0.8 <= delay <= base * 1.2


def test_intermittent_errors_succeed_after_reproducible_retries(sleeps: RecordingSleep) -> None:
    attempts = []
    for _ in range(2):
        gateway = LiteLLMGateway(RetryPolicy(max_retries=10), sleep=sleeps, environ={})
        attempts.append(gateway.complete(observer_request(errorRate=0.5, seed=11)).attempts)
    assert attempts[0] == attempts[1]
    seen = {
        LiteLLMGateway(RetryPolicy(max_retries=10), sleep=sleeps, environ={})
        .complete(observer_request(errorRate=0.5, seed=seed))
        .attempts
        for seed in range(12)
    }
    assert max(seen) > 1


def test_max_retries_setting_overrides_the_policy(gateway: LiteLLMGateway) -> None:
    request = observer_request(errorRate=1.0)
    request = ModelRequest(
        model=request.model,
        messages=request.messages,
        purpose=request.purpose,
        settings={"maxRetries": 0},
        provider_options=request.provider_options,
    )
    with pytest.raises(TransientModelError) as excinfo:
        gateway.complete(request)
    assert excinfo.value.attempts == 1


def test_latency_is_honoured(gateway: LiteLLMGateway) -> None:
    started = time.perf_counter()
    response = gateway.complete(observer_request(latencyMs=120))
    assert time.perf_counter() - started >= 0.12
    assert response.latency_ms >= 120


@pytest.mark.parametrize(
    ("mode", "expected"), [("empty", EMPTY_OBSERVATIONS), ("degenerate", DEGENERATE_OUTPUT)]
)
def test_output_modes(gateway: LiteLLMGateway, mode: str, expected: str) -> None:
    assert gateway.complete(observer_request(output=mode)).text == expected


def test_structured_output_request(gateway: LiteLLMGateway) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "where the user lives"}},
    }
    request = ModelRequest(
        model="om-local/extractive",
        messages=[
            {"role": "user", "content": "## Message history\n" + TRANSCRIPT + "\n--- end of input ---"}
        ],
        purpose="extract",
        response_schema=schema,
    )
    assert gateway.complete(request).text == '{"city": "My name is Priya Raman and I live in Lisbon."}'


def test_bad_local_options_fail_permanently_without_retry(
    gateway: LiteLLMGateway, sleeps: RecordingSleep
) -> None:
    with pytest.raises(PermanentModelError, match="errorRate must be within") as excinfo:
        gateway.complete(observer_request(errorRate=3))
    assert excinfo.value.attempts == 1 and sleeps.delays == []


def test_cloud_model_without_key_fails_fast_with_configuration_error(
    gateway: LiteLLMGateway, sleeps: RecordingSleep
) -> None:
    request = ModelRequest(model="openai/gpt-nonexistent", messages=MESSAGES, purpose="observation")
    started = time.perf_counter()
    with pytest.raises(ModelConfigurationError, match="'openai/gpt-nonexistent' needs OPENAI_API_KEY"):
        gateway.complete(request)
    assert time.perf_counter() - started < 1 and sleeps.delays == []


def test_cloud_auth_failure_is_permanent(sleeps: RecordingSleep) -> None:
    # A key is present, but the provider refuses it: litellm raises AuthenticationError, never retried.
    litellm = load_litellm()
    error = litellm.AuthenticationError(message="bad key", llm_provider="openai", model="gpt-x")
    assert not is_transient(error)
    for transient in (
        litellm.RateLimitError(message="slow down", llm_provider="openai", model="gpt-x"),
        litellm.ServiceUnavailableError(message="overloaded", llm_provider="openai", model="gpt-x"),
        litellm.InternalServerError(message="boom", llm_provider="openai", model="gpt-x"),
        litellm.Timeout(message="timed out", model="gpt-x", llm_provider="openai"),
        litellm.APIConnectionError(message="ECONNRESET", llm_provider="openai", model="gpt-x"),
        ConnectionResetError("connection reset by peer"),
    ):
        assert is_transient(transient), transient
    assert not is_transient(litellm.BadRequestError(message="bad", model="gpt-x", llm_provider="openai"))
    assert not is_transient(litellm.NotFoundError(message="no model", model="gpt-x", llm_provider="openai"))


def test_unreachable_provider_is_transient_and_bounded(sleeps: RecordingSleep) -> None:
    gateway = LiteLLMGateway(
        RetryPolicy(max_retries=1), timeout_s=2.0, sleep=sleeps, environ={"OPENAI_API_KEY": "sk-test"}
    )
    request = ModelRequest(
        model="openai/gpt-4o-mini",
        messages=MESSAGES,
        purpose="observation",
        settings={"apiBase": "http://127.0.0.1:9/v1"},
    )
    with pytest.raises(TransientModelError) as excinfo:
        gateway.complete(request)
    assert excinfo.value.attempts == 2 and len(sleeps.delays) == 1


def test_completion_kwargs_translate_settings_and_provider_options() -> None:
    request = ModelRequest(
        model="google/gemini-2.5-flash",
        messages=MESSAGES,
        purpose="observation",
        settings={"temperature": 0.3, "maxOutputTokens": 100_000, "top_p": 0.9, "stopSequences": ["END"]},
        provider_options={
            "google": {"thinkingConfig": {"thinkingBudget": 1024}, "safetySettings": []},
            "openai": {"reasoningEffort": "low"},
        },
        response_schema={"title": "User profile!", "type": "object"},
    )
    kwargs, retries = completion_kwargs(request)
    assert retries is None
    assert kwargs == {
        "model": "gemini/gemini-2.5-flash",
        "messages": MESSAGES,
        "temperature": 0.3,
        "max_tokens": 100_000,
        "top_p": 0.9,
        "stop": ["END"],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "safety_settings": [],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "User_profile", "schema": {"title": "User profile!", "type": "object"}},
        },
    }
    with pytest.raises(ModelConfigurationError, match=r"modelSettings\.creativity is not supported"):
        completion_kwargs(
            ModelRequest(model="om-local/extractive", messages=[], purpose="x", settings={"creativity": 1})
        )


def test_per_call_overhead_through_litellm(gateway: LiteLLMGateway) -> None:
    request = ModelRequest(model="om-local/extractive", messages=MESSAGES, purpose="observation")
    gateway.complete(request)
    runs = 50
    started = time.perf_counter()
    for _ in range(runs):
        gateway.complete(request)
    per_call_ms = (time.perf_counter() - started) * 1000 / runs
    print(f"\nom-local call through litellm: {per_call_ms:.2f} ms per call")
    assert per_call_ms < 100


def test_embeddings_go_through_litellm_in_order_and_a_chat_model_cannot_embed() -> None:
    from om_core.adapters.models.om_local import HASHING_DIMENSIONS, hashing_embedding
    from om_core.application.ports import EmbeddingRequest

    gateway = LiteLLMGateway(RetryPolicy(max_retries=0))
    texts = ["Priya lives in Lisbon", "the dog is a beagle", "Priya lives in Lisbon"]
    response = gateway.embed(EmbeddingRequest(model="om-local/hashing", texts=texts))
    assert response.vectors == [hashing_embedding(t) for t in texts]
    assert len(response.vectors[0]) == HASHING_DIMENSIONS
    assert response.usage.input_tokens > 0 and response.attempts == 1 and response.model == "om-local/hashing"
    with pytest.raises(PermanentModelError, match="embed"):
        gateway.embed(EmbeddingRequest(model="om-local/extractive", texts=["x"]))
    with pytest.raises(PermanentModelError, match="embeds"):
        gateway.complete(ModelRequest(model="om-local/hashing", messages=MESSAGES, purpose="observation"))
    with pytest.raises(ModelConfigurationError, match="OPENAI_API_KEY"):
        LiteLLMGateway(environ={}).embed(EmbeddingRequest(model="openai/text-embedding-3-small", texts=["x"]))
