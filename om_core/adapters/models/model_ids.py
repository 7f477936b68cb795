"""Mastra model ids (``provider/model``) and what litellm needs to call them.

Pure functions: the start-up credential check and config validation use them without importing litellm.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from om_core.application.ports import ModelConfigurationError
from om_core.domain.placeholders import is_placeholder

OM_LOCAL_PROVIDER = "om-local"
OM_LOCAL_MODELS = frozenset({"extractive", "hashing", "chat"})
KEYLESS_MODEL = f"{OM_LOCAL_PROVIDER}/extractive"


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    litellm_prefix: str
    # The key of this provider's entry in Mastra's ``providerOptions`` (the AI SDK provider name).
    options_key: str
    # Every variable litellm or the AI SDK reads for this provider, in lookup order; empty for keyless ones.
    api_key_env: tuple[str, ...]
    # The variables litellm reads for where the provider's API is served, when not at the provider itself.
    api_base_env: tuple[str, ...] = ()


PROVIDERS: Mapping[str, ProviderInfo] = {
    # GOOGLE_GENERATIVE_AI_API_KEY is the AI SDK's name, so a Mastra deployment's environment works unchanged.
    "google": ProviderInfo(
        "gemini", "google", ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY")
    ),
    "openai": ProviderInfo("openai", "openai", ("OPENAI_API_KEY",), ("OPENAI_BASE_URL", "OPENAI_API_BASE")),
    "anthropic": ProviderInfo("anthropic", "anthropic", ("ANTHROPIC_API_KEY",)),
    "openrouter": ProviderInfo("openrouter", "openrouter", ("OPENROUTER_API_KEY",)),
    "groq": ProviderInfo("groq", "groq", ("GROQ_API_KEY",)),
    "deepseek": ProviderInfo("deepseek", "deepseek", ("DEEPSEEK_API_KEY",)),
    "xai": ProviderInfo("xai", "xai", ("XAI_API_KEY",)),
    OM_LOCAL_PROVIDER: ProviderInfo(OM_LOCAL_PROVIDER, "omLocal", ()),
}

# litellm's own prefix for Google is accepted too, since operators copy ids from litellm's documentation.
_ALIASES: Mapping[str, str] = {"gemini": "google"}


def _split(mastra_id: str) -> tuple[str, str]:
    provider, sep, name = mastra_id.strip().partition("/")
    if not sep or not provider or not name:
        raise ModelConfigurationError(
            f"model {mastra_id!r}: expected 'provider/model', e.g. 'google/gemini-2.5-flash'"
        )
    provider = _ALIASES.get(provider.lower(), provider.lower())
    if provider not in PROVIDERS:
        raise ModelConfigurationError(
            f"model {mastra_id!r}: unknown provider {provider!r}; supported: {', '.join(sorted(PROVIDERS))}"
        )
    if provider == OM_LOCAL_PROVIDER and name not in OM_LOCAL_MODELS:
        raise ModelConfigurationError(
            f"model {mastra_id!r}: the local provider offers {', '.join(sorted(OM_LOCAL_MODELS))}"
        )
    return provider, name


def provider_of(mastra_id: str) -> str:
    """The Mastra provider name of a model id (``google`` for ``google/gemini-2.5-flash``)."""
    return _split(mastra_id)[0]


def to_litellm_model(mastra_id: str) -> str:
    """The litellm model string for a Mastra model id; raises ModelConfigurationError when unusable."""
    provider, name = _split(mastra_id)
    return f"{PROVIDERS[provider].litellm_prefix}/{name}"


def api_key_from_env(provider: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The first API key variable set for ``provider`` to a real key: an empty one or a placeholder copied
    from an example (``CHANGE-ME``) counts as unset."""
    env = os.environ if environ is None else environ
    for name in PROVIDERS[provider].api_key_env:
        value = env.get(name, "").strip()
        if value and not is_placeholder(value):
            return value
    return None


def placeholder_keys(provider: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """The API key variables of ``provider`` that hold a placeholder, for the refusal to name them."""
    env = os.environ if environ is None else environ
    return [name for name in PROVIDERS[provider].api_key_env if is_placeholder(env.get(name, ""))]


def api_base_from_env(provider: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The first non-empty variable set for where ``provider``'s API is served (``OPENAI_BASE_URL``)."""
    env = os.environ if environ is None else environ
    for name in PROVIDERS[provider].api_base_env:
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def missing_api_key(
    mastra_id: str, environ: Mapping[str, str] | None = None, *, api_base: str | None = None
) -> tuple[str, ...]:
    """The variables one of which must be set before ``mastra_id`` can be called; empty when it can.

    A model served elsewhere (``api_base``, or the provider's base URL variable) needs no key: a local
    OpenAI-compatible server (llama.cpp, Ollama, vLLM) asks for none, and one that does answers 401."""
    provider = provider_of(mastra_id)
    if api_base is not None or api_base_from_env(provider, environ) is not None:
        return ()
    needed = PROVIDERS[provider].api_key_env
    return needed if needed and api_key_from_env(provider, environ) is None else ()


def check_model_credentials(
    model_ids: Iterable[str], environ: Mapping[str, str] | None = None, *, api_base: str | None = None
) -> None:
    """Fail fast at start-up when a configured cloud model has no API key in the environment; models
    served at ``api_base`` need none."""
    problems = [
        f"model {mastra_id!r} needs {' or '.join(needed)} to be set{_placeholder_note(mastra_id, environ)}"
        for mastra_id in dict.fromkeys(model_ids)
        if (needed := missing_api_key(mastra_id, environ, api_base=api_base))
    ]
    if problems:
        raise ModelConfigurationError(
            "; ".join(problems) + f" (or use the keyless local model {KEYLESS_MODEL!r})"
        )


def _placeholder_note(mastra_id: str, environ: Mapping[str, str] | None) -> str:
    found = placeholder_keys(provider_of(mastra_id), environ)
    return f" to a real key ({', '.join(found)} holds a placeholder)" if found else ""
