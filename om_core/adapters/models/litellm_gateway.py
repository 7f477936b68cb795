"""The model gateway: every Observer, Reflector and extractor call goes through litellm.

litellm is imported on the first call, not with this module: it takes seconds to import and the CLI and the
API's hot path never need it.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

from om_core.adapters.models.model_ids import (
    OM_LOCAL_PROVIDER,
    PROVIDERS,
    api_base_from_env,
    api_key_from_env,
    check_model_credentials,
    provider_of,
    to_litellm_model,
)
from om_core.application.ports import (
    ChatCall,
    ChatModelError,
    ChatModels,
    EmbeddingRequest,
    EmbeddingResponse,
    ModelConfigurationError,
    ModelError,
    ModelGateway,
    ModelRequest,
    ModelResponse,
    ModelUsage,
    PermanentModelError,
    TransientModelError,
)

__all__ = [
    "MODEL_SETTINGS",
    "LiteLLMGateway",
    "RetryPolicy",
    "chat_error",
    "check_model_credentials",
    "completion_kwargs",
    "fallback_route",
    "is_transient",
    "load_litellm",
]

# Mastra ``modelSettings`` (AI SDK call settings) → litellm completion parameters; snake_case accepted too.
MODEL_SETTINGS: Mapping[str, str] = {
    "temperature": "temperature",
    "maxOutputTokens": "max_tokens",
    "maxTokens": "max_tokens",
    "topP": "top_p",
    "topK": "top_k",
    "presencePenalty": "presence_penalty",
    "frequencyPenalty": "frequency_penalty",
    "stopSequences": "stop",
    "seed": "seed",
    "headers": "extra_headers",
    "apiBase": "api_base",
}
_RETRY_SETTING = "maxRetries"
# the models to try after the request's own, with their retry bounds (a model list; see fallback_route)
_FALLBACKS_SETTING = "fallbacks"


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


_SETTING_ALIASES: Mapping[str, str] = {
    **{key: key for key in (*MODEL_SETTINGS, _RETRY_SETTING)},
    **{_snake(key): key for key in (*MODEL_SETTINGS, _RETRY_SETTING)},
}

# Where a call goes and with which key come from modelSettings.apiBase and the server's environment only: a
# thread's providerOptions naming them could send the server's API key to an address of its choosing.
_CONNECTION_OPTIONS = frozenset({"api_base", "base_url", "api_key"})
# The OpenAI client will not start without a key, though a local OpenAI-compatible server checks none.
_UNCHECKED_API_KEY = "no-key"

_RETRYABLE_STATUS = frozenset({408, 425, 429})
_NETWORK_MESSAGES = re.compile(
    r"ECONNRESET|ECONNREFUSED|ETIMEDOUT|EPIPE|connection (reset|refused|aborted|error)|timed? ?out|"
    r"fetch failed|terminated|socket hang up|UND_ERR_",
    re.I,
)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with jitter for transient failures; Mastra's defaults (9 attempts, 1 s → 120 s)."""

    max_retries: int = 8
    initial_delay_s: float = 1.0
    max_delay_s: float = 120.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be ≥ 0, got {self.max_retries}")
        if self.initial_delay_s < 0 or self.max_delay_s < self.initial_delay_s:
            raise ValueError("delays must satisfy 0 ≤ initial_delay_s ≤ max_delay_s")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be within [0, 1), got {self.jitter}")

    def delay_s(self, retry: int, rng: random.Random) -> float:
        """The wait before retry number ``retry`` (1-based)."""
        base = min(self.max_delay_s, self.initial_delay_s * 2.0 ** (retry - 1))
        return max(0.0, base * (1 + self.jitter * rng.uniform(-1, 1)))


_load_lock = threading.Lock()


@functools.cache
def _import_litellm() -> ModuleType:
    # Without a local cost map litellm fetches one over the network at import and waits on retries offline.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    import litellm

    from om_core.adapters.models.om_local_llm import register_om_local

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    # Prompts hold users' conversations: keep them out of whatever logging callbacks get configured.
    litellm.turn_off_message_logging = True
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        logging.getLogger(name).setLevel(logging.ERROR)
    register_om_local(litellm)
    return litellm


def load_litellm() -> ModuleType:
    """litellm, imported once per process, quiet, with the om-local provider registered."""
    with _load_lock:
        return _import_litellm()


def _translate_provider_options(provider: str, options: Mapping[str, Any]) -> dict[str, Any]:
    def snake_keys(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {_snake(str(k)): snake_keys(v) for k, v in value.items()}
        return value

    translated: dict[str, Any] = snake_keys(options)
    # Google's thinking budget is litellm's provider-neutral ``thinking`` parameter.
    thinking_config = translated.pop("thinking_config", None) if provider == "google" else None
    if isinstance(thinking_config, Mapping) and "thinking_budget" in thinking_config:
        translated["thinking"] = {"type": "enabled", "budget_tokens": thinking_config["thinking_budget"]}
    return translated


def _schema_name(schema: Mapping[str, Any]) -> str:
    title = re.sub(r"[^A-Za-z0-9_-]+", "_", str(schema.get("title", ""))).strip("_")[:64]
    return title or "extraction"


def completion_kwargs(request: ModelRequest) -> tuple[dict[str, Any], int | None]:
    """litellm ``completion`` arguments for ``request`` and its ``maxRetries`` override, if any.

    Only the provider's own entry of ``providerOptions`` is sent, as the AI SDK does. Raises
    ModelConfigurationError for an unusable model id or an unknown model setting.
    """
    provider = provider_of(request.model)
    kwargs: dict[str, Any] = {"model": to_litellm_model(request.model), "messages": request.messages}
    max_retries: int | None = None
    for key, value in request.settings.items():
        canonical = _SETTING_ALIASES.get(key)
        if canonical is None:
            raise ModelConfigurationError(
                f"modelSettings.{key} is not supported; supported: {', '.join(sorted(MODEL_SETTINGS))}, "
                f"{_RETRY_SETTING}"
            )
        if canonical == _RETRY_SETTING:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ModelConfigurationError(f"modelSettings.{key} must be an integer ≥ 0, got {value!r}")
            max_retries = value
        elif value is not None:
            kwargs[MODEL_SETTINGS[canonical]] = value
    options_key = PROVIDERS[provider].options_key
    options = request.provider_options.get(options_key, request.provider_options.get(_snake(options_key)))
    if options is not None and not isinstance(options, Mapping):
        raise ModelConfigurationError(f"providerOptions.{options_key} must be an object, got {options!r}")
    if provider == OM_LOCAL_PROVIDER:
        kwargs["omLocal"] = dict(options or {})
    elif options:
        translated = _translate_provider_options(provider, options)
        if refused := sorted(_CONNECTION_OPTIONS.intersection(translated)):
            raise ModelConfigurationError(
                f"providerOptions.{options_key}: {', '.join(refused)} cannot be set here; "
                "the server's modelSettings.apiBase says where a model is served"
            )
        kwargs.update(translated)
    if request.response_schema is not None:
        kwargs["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": _schema_name(request.response_schema), "schema": request.response_schema},
        }
    return kwargs, max_retries


def fallback_route(request: ModelRequest) -> list[ModelRequest]:
    """``request``, then one request per entry of its ``fallbacks`` setting (``[{model, maxRetries}]``,
    a model list), each entry's ``maxRetries`` replacing the request's own."""
    fallbacks = request.settings.get(_FALLBACKS_SETTING)
    if fallbacks is None:
        return [request]
    if not isinstance(fallbacks, list | tuple):
        raise ModelConfigurationError(f"the fallbacks setting must be a list, got {fallbacks!r}")
    base = {key: value for key, value in request.settings.items() if key != _FALLBACKS_SETTING}
    route = [replace(request, settings=base)]
    without_retries = {k: v for k, v in base.items() if _SETTING_ALIASES.get(k) != _RETRY_SETTING}
    for entry in fallbacks:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("model"), str):
            raise ModelConfigurationError(f"a fallback must be {{model, maxRetries?}}, got {entry!r}")
        settings = dict(without_retries)
        if entry.get(_RETRY_SETTING) is not None:
            settings[_RETRY_SETTING] = entry[_RETRY_SETTING]
        else:
            settings.update({k: v for k, v in base.items() if _SETTING_ALIASES.get(k) == _RETRY_SETTING})
        route.append(replace(request, model=entry["model"], settings=settings))
    return route


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def is_transient(exc: BaseException) -> bool:
    """Retryable: HTTP 408/425/429/5xx, timeouts, dropped or refused connections; not other 4xx."""
    litellm = load_litellm()
    # litellm reports missing credentials and dead connections alike as APIConnectionError (status 500).
    if isinstance(exc, litellm.Timeout | litellm.APIConnectionError | TimeoutError | ConnectionError):
        return True
    status = _status_of(exc)
    if status is not None:
        return status in _RETRYABLE_STATUS or status >= 500
    return bool(_NETWORK_MESSAGES.search(str(exc)))


def chat_error(model: str, exc: BaseException) -> ChatModelError:
    """What a failed proxied chat call answers the app with: the provider's own 4xx status, 502 for a
    provider that failed or could not be reached (503 when it said so), 504 for one that timed out."""
    litellm = load_litellm()
    message = f"{model}: {getattr(exc, 'message', None) or exc}"
    if isinstance(exc, litellm.Timeout | TimeoutError):
        return ChatModelError(504, message, kind="timeout", code="timeout")
    if isinstance(exc, litellm.APIConnectionError | ConnectionError):
        return ChatModelError(502, message, kind="api_error", code="upstream_unreachable")
    status = _status_of(exc)
    if status is None or status >= 500:
        return ChatModelError(503 if status == 503 else 502, message, kind="api_error", code="upstream_error")
    if status == 429:
        return ChatModelError(429, message, kind="rate_limit_error", code="rate_limit_exceeded")
    if status == 401:
        return ChatModelError(401, message, kind="authentication_error", code="invalid_api_key")
    if status == 403:
        return ChatModelError(403, message, kind="permission_error")
    if status == 404:
        return ChatModelError(
            404, message, kind="invalid_request_error", code="model_not_found", param="model"
        )
    return ChatModelError(status, message, kind="invalid_request_error")


class LiteLLMGateway(ModelGateway, ChatModels):
    """Runs model calls through litellm with bounded retries; reports usage, cost, latency and attempts.

    ``latency_ms`` covers the whole call including retries and backoff: it is what the caller waited.
    """

    def __init__(
        self,
        retry_policy: RetryPolicy | None = None,
        *,
        timeout_s: float = 600.0,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._retry = retry_policy or RetryPolicy()
        self._timeout_s = timeout_s
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._environ = environ

    def complete(self, request: ModelRequest) -> ModelResponse:
        """The call, and when its model still fails after its retries, the same call to each model of the
        ``fallbacks`` setting in turn (a model list), each with its own ``maxRetries``. ``attempts`` and
        ``latency_ms`` cover every model tried; ``model`` is the one that answered."""
        route = fallback_route(request)
        started = time.perf_counter()
        attempts = 0
        for index, candidate in enumerate(route):
            last = index == len(route) - 1
            try:
                response = self._complete_one(candidate)
            except ModelError as exc:
                attempts += exc.attempts
                if last:
                    exc.attempts = attempts
                    raise
                continue
            except ModelConfigurationError:
                # a key removed after the config was accepted: the next model may still be callable
                if last:
                    raise
                continue
            if index == 0:
                return response
            return replace(
                response,
                attempts=attempts + response.attempts,
                latency_ms=(time.perf_counter() - started) * 1000,
            )
        raise AssertionError("a route has at least one model")

    def _complete_one(self, request: ModelRequest) -> ModelResponse:
        kwargs, retries_override = completion_kwargs(request)
        provider = provider_of(request.model)
        api_base = kwargs.get("api_base") or api_base_from_env(provider, self._environ)
        # Checked here rather than left to litellm, which reports some missing keys as retryable errors.
        check_model_credentials([request.model], self._environ, api_base=api_base)
        api_key = api_key_from_env(provider, self._environ)
        if api_base is not None:
            kwargs["api_base"] = api_base
            api_key = api_key or _UNCHECKED_API_KEY
        if api_key is not None:
            kwargs["api_key"] = api_key
        litellm = load_litellm()
        max_retries = self._retry.max_retries if retries_override is None else retries_override
        started = time.perf_counter()

        def call(attempt: int) -> Any:
            if provider == OM_LOCAL_PROVIDER:
                kwargs["omLocal"] = {**kwargs["omLocal"], "attempt": attempt}
            # max_retries=0 turns off the provider SDK's own retries: this gateway's loop is the only one.
            return litellm.completion(**kwargs, timeout=self._timeout_s, max_retries=0, drop_params=True)

        response, attempts = self._with_retries(request.model, max_retries, call)
        return self._response(request, response, provider, kwargs["model"], attempts, started)

    def embed(self, request: EmbeddingRequest) -> EmbeddingResponse:
        provider = provider_of(request.model)
        check_model_credentials([request.model], self._environ)
        kwargs: dict[str, Any] = {"model": to_litellm_model(request.model), "input": request.texts}
        api_key = api_key_from_env(provider, self._environ)
        if api_key is not None:
            kwargs["api_key"] = api_key
        litellm = load_litellm()
        started = time.perf_counter()
        response, attempts = self._with_retries(
            request.model,
            self._retry.max_retries,
            lambda _: litellm.embedding(**kwargs, timeout=self._timeout_s, max_retries=0),
        )
        rows = sorted(getattr(response, "data", None) or [], key=lambda row: int(row["index"]))
        vectors = [[float(v) for v in row["embedding"]] for row in rows]
        if len(vectors) != len(request.texts):
            raise PermanentModelError(
                f"{request.model}: {len(vectors)} embeddings for {len(request.texts)} texts",
                model=request.model,
            )
        usage = getattr(response, "usage", None)
        return EmbeddingResponse(
            vectors=vectors,
            model=request.model,
            usage=ModelUsage(input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0)),
            latency_ms=(time.perf_counter() - started) * 1000,
            attempts=attempts,
        )

    def chat(self, call: ChatCall) -> dict[str, Any]:
        kwargs = self._chat_kwargs(call)
        try:
            response = load_litellm().completion(**kwargs)
        except Exception as exc:
            raise chat_error(call.model, exc) from exc
        body: dict[str, Any] = response.model_dump(exclude_none=True)
        return body

    def chat_stream(self, call: ChatCall) -> Iterator[dict[str, Any]]:
        kwargs = self._chat_kwargs(call)
        try:
            chunks = iter(load_litellm().completion(**kwargs, stream=True))
            # the first chunk is where most providers report a refused request: before any answer is sent
            first = next(chunks, None)
        except Exception as exc:
            raise chat_error(call.model, exc) from exc
        return self._chunks(call.model, first, chunks)

    @staticmethod
    def _chunks(model: str, first: Any, rest: Iterator[Any]) -> Iterator[dict[str, Any]]:
        if first is None:
            return
        yield first.model_dump(exclude_none=True)
        while True:
            try:
                chunk = next(rest)
            except StopIteration:
                return
            except Exception as exc:
                raise chat_error(model, exc) from exc
            yield chunk.model_dump(exclude_none=True)

    def _chat_kwargs(self, call: ChatCall) -> dict[str, Any]:
        try:
            provider = provider_of(call.model)
            litellm_model = to_litellm_model(call.model)
        except ModelConfigurationError as exc:
            raise ChatModelError(
                404, str(exc), kind="invalid_request_error", code="model_not_found", param="model"
            ) from exc
        api_key = call.api_key or api_key_from_env(provider, self._environ)
        if api_key is None and PROVIDERS[provider].api_key_env:
            needed = " or ".join(PROVIDERS[provider].api_key_env)
            raise ChatModelError(
                400,
                f"{call.model}: the server has no API key for {provider} ({needed}) and the request "
                "forwarded none",
                kind="invalid_request_error",
                code="model_not_available",
                param="model",
            )
        kwargs: dict[str, Any] = {
            **call.options,
            "model": litellm_model,
            "messages": call.messages,
            "timeout": self._timeout_s,
            # the app's client retries on the status the proxy answers with; retrying here too would
            # multiply its attempts and hold the request for minutes
            "max_retries": 0,
            "drop_params": True,
        }
        if api_key is not None:
            kwargs["api_key"] = api_key
        return kwargs

    def _with_retries(self, model: str, max_retries: int, call: Callable[[int], Any]) -> tuple[Any, int]:
        """``call(attempt)`` until it succeeds, retrying transient failures: (result, attempts)."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return call(attempt), attempt
            except Exception as exc:
                if not is_transient(exc):
                    raise PermanentModelError(
                        f"{model}: {type(exc).__name__}: {exc}", model=model, attempts=attempt
                    ) from exc
                if attempt > max_retries:
                    raise TransientModelError(
                        f"{model}: {type(exc).__name__} after {attempt} attempt(s): {exc}",
                        model=model,
                        attempts=attempt,
                    ) from exc
                self._sleep(self._retry.delay_s(attempt, self._rng))

    def _response(
        self,
        request: ModelRequest,
        response: Any,
        provider: str,
        litellm_model: str,
        attempts: int,
        started: float,
    ) -> ModelResponse:
        choices = getattr(response, "choices", None) or []
        message = getattr(choices[0], "message", None) if choices else None
        text = getattr(message, "content", None) or ""
        usage = getattr(response, "usage", None)
        cost: float | None
        if provider == OM_LOCAL_PROVIDER:
            cost = 0.0
        else:
            try:
                cost = float(
                    load_litellm().completion_cost(completion_response=response, model=litellm_model)
                )
            except Exception:
                # Models missing from litellm's price list have no known cost; the call itself succeeded.
                cost = None
        return ModelResponse(
            text=text,
            model=request.model,
            usage=ModelUsage(
                input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                cost_usd=cost,
            ),
            latency_ms=(time.perf_counter() - started) * 1000,
            attempts=attempts,
        )
