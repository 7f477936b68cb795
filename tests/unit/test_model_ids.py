import pytest

from om_core.adapters.models.model_ids import (
    api_key_from_env,
    check_model_credentials,
    provider_of,
    to_litellm_model,
)
from om_core.application.ports import ModelConfigurationError


@pytest.mark.parametrize(
    ("mastra_id", "litellm_id", "provider"),
    [
        ("google/gemini-2.5-flash", "gemini/gemini-2.5-flash", "google"),
        ("gemini/gemini-2.5-pro", "gemini/gemini-2.5-pro", "google"),
        ("openai/gpt-5-mini", "openai/gpt-5-mini", "openai"),
        ("anthropic/claude-sonnet-4-5", "anthropic/claude-sonnet-4-5", "anthropic"),
        ("openrouter/meta-llama/llama-3.3-70b", "openrouter/meta-llama/llama-3.3-70b", "openrouter"),
        ("groq/llama-3.1-8b-instant", "groq/llama-3.1-8b-instant", "groq"),
        ("deepseek/deepseek-chat", "deepseek/deepseek-chat", "deepseek"),
        ("xai/grok-4", "xai/grok-4", "xai"),
        ("om-local/extractive", "om-local/extractive", "om-local"),
    ],
)
def test_mastra_ids_map_to_litellm_ids(mastra_id: str, litellm_id: str, provider: str) -> None:
    assert to_litellm_model(mastra_id) == litellm_id
    assert provider_of(mastra_id) == provider


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ("gpt-5", "expected 'provider/model'"),
        ("openai/", "expected 'provider/model'"),
        ("mistral/large", "unknown provider 'mistral'"),
        ("om-local/creative", "the local provider offers chat, extractive"),
    ],
)
def test_unusable_ids_are_configuration_errors(bad: str, fragment: str) -> None:
    with pytest.raises(ModelConfigurationError, match=fragment):
        to_litellm_model(bad)


def test_api_key_lookup_follows_provider_variables_in_order() -> None:
    env = {"GOOGLE_API_KEY": "g2", "GOOGLE_GENERATIVE_AI_API_KEY": "g3"}
    assert api_key_from_env("google", env) == "g2"
    assert api_key_from_env("google", {"GEMINI_API_KEY": " ", "GOOGLE_GENERATIVE_AI_API_KEY": "g3"}) == "g3"
    assert api_key_from_env("openai", {}) is None


def test_credentials_check_names_model_and_variable() -> None:
    with pytest.raises(ModelConfigurationError) as excinfo:
        check_model_credentials(["google/gemini-2.5-flash", "om-local/extractive", "openai/gpt-5-mini"], {})
    message = str(excinfo.value)
    assert "'google/gemini-2.5-flash' needs GEMINI_API_KEY or GOOGLE_API_KEY" in message
    assert "'openai/gpt-5-mini' needs OPENAI_API_KEY" in message
    assert "om-local/extractive" in message  # the keyless alternative is suggested


def test_credentials_check_passes_for_local_and_keyed_models() -> None:
    check_model_credentials(["om-local/extractive"], {})
    check_model_credentials(
        ["anthropic/claude-x", "xai/grok-4"], {"ANTHROPIC_API_KEY": "a", "XAI_API_KEY": "x"}
    )


def test_a_thread_is_refused_only_the_keyless_models_its_overrides_add() -> None:
    from om_core.bootstrap import check_thread_models
    from om_core.domain.config import ConfigError

    profile = {"model": "om-local/extractive"}
    with pytest.raises(ConfigError) as refused:
        check_thread_models(profile, {"reflection": {"model": {"upTo": {"10": "openai/gpt-5-mini"}}}}, {})
    assert [(p.option, p.value) for p in refused.value.problems] == [
        ("reflection.model.upTo.10", "openai/gpt-5-mini")
    ]
    assert "OPENAI_API_KEY" in refused.value.problems[0].rule
    check_thread_models(profile, {"reflection": {"model": "openai/gpt-5-mini"}}, {"OPENAI_API_KEY": "k"})
    # a profile that brought its own gateway is not re-judged on every thread
    keyless_profile = {"model": "google/gemini-2.5-flash"}
    check_thread_models(keyless_profile, {"observation": {"messageTokens": 500}}, {})
