"""The litellm handler of ``om-local/*`` and its registration. Imports litellm, so only ``load_litellm`` (in
``litellm_gateway``) imports this module, once litellm is wanted."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
from litellm.exceptions import BadRequestError, RateLimitError, ServiceUnavailableError
from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import EmbeddingResponse, GenericStreamingChunk, ModelResponse, Usage

from om_core.adapters.models.model_ids import OM_LOCAL_PROVIDER
from om_core.adapters.models.om_local import (
    HASHING_EMBEDDER,
    OmLocalOptions,
    OmLocalRequestError,
    OmLocalTransientError,
    count_tokens,
    hashing_embedding,
    respond,
)
from om_core.adapters.models.om_local_chat import CHAT_MODEL, chat_completion, chat_stream


class OmLocalLLM(CustomLLM):
    """Serves ``om-local/*``: the extractive model's and the chat model's completions, the chat model's
    streams and the hashing embedder; failures surface as litellm's own HTTP-status exceptions."""

    def completion(
        self,
        model: str,
        messages: list[Any],
        api_base: str,
        custom_prompt_dict: dict[str, Any],
        model_response: ModelResponse,
        print_verbose: Callable[..., Any],
        encoding: Any,
        api_key: Any,
        logging_obj: Any,
        optional_params: dict[str, Any],
        acompletion: Any = None,
        litellm_params: Any = None,
        logger_fn: Any = None,
        headers: dict[str, Any] | None = None,
        timeout: float | httpx.Timeout | None = None,
        client: Any = None,
    ) -> ModelResponse:
        full_model = f"{OM_LOCAL_PROVIDER}/{model}"
        if model == CHAT_MODEL:
            return chat_completion(messages, optional_params, model_response)
        if model == HASHING_EMBEDDER:
            raise BadRequestError(
                message=f"{full_model} embeds; the local chat model is {OM_LOCAL_PROVIDER}/extractive",
                model=full_model,
                llm_provider=OM_LOCAL_PROVIDER,
            )
        try:
            options = OmLocalOptions.from_mapping(optional_params.get("omLocal"))
            reply = respond(messages, options, response_format=optional_params.get("response_format"))
        except OmLocalRequestError as exc:
            raise BadRequestError(message=str(exc), model=full_model, llm_provider=OM_LOCAL_PROVIDER) from exc
        except OmLocalTransientError as exc:
            if exc.status == 429:
                raise RateLimitError(
                    message=str(exc), llm_provider=OM_LOCAL_PROVIDER, model=full_model
                ) from exc
            raise ServiceUnavailableError(
                message=str(exc), llm_provider=OM_LOCAL_PROVIDER, model=full_model
            ) from exc
        model_response.choices[0].message.content = reply.text
        model_response.model = full_model
        usage = Usage(
            prompt_tokens=reply.input_tokens,
            completion_tokens=reply.output_tokens,
            total_tokens=reply.input_tokens + reply.output_tokens,
        )
        setattr(model_response, "usage", usage)  # noqa: B010 - Usage is not a declared field of ModelResponse
        return model_response

    def streaming(
        self,
        model: str,
        messages: list[Any],
        api_base: str,
        custom_prompt_dict: dict[str, Any],
        model_response: ModelResponse,
        print_verbose: Callable[..., Any],
        encoding: Any,
        api_key: Any,
        logging_obj: Any,
        optional_params: dict[str, Any],
        acompletion: Any = None,
        litellm_params: Any = None,
        logger_fn: Any = None,
        headers: dict[str, Any] | None = None,
        timeout: float | httpx.Timeout | None = None,
        client: Any = None,
    ) -> Iterator[GenericStreamingChunk]:
        if model != CHAT_MODEL:
            full_model = f"{OM_LOCAL_PROVIDER}/{model}"
            raise BadRequestError(
                message=f"{full_model} does not stream; {OM_LOCAL_PROVIDER}/{CHAT_MODEL} does",
                model=full_model,
                llm_provider=OM_LOCAL_PROVIDER,
            )
        return chat_stream(messages, optional_params)

    def embedding(
        self,
        model: str,
        input: list[Any],
        model_response: EmbeddingResponse,
        print_verbose: Callable[..., Any],
        logging_obj: Any,
        optional_params: dict[str, Any],
        api_key: str | None = None,
        api_base: str | None = None,
        timeout: float | httpx.Timeout | None = None,
        litellm_params: Any = None,
    ) -> EmbeddingResponse:
        full_model = f"{OM_LOCAL_PROVIDER}/{model}"
        if model != HASHING_EMBEDDER:
            raise BadRequestError(
                message=f"{full_model} does not embed; use {OM_LOCAL_PROVIDER}/{HASHING_EMBEDDER}",
                model=full_model,
                llm_provider=OM_LOCAL_PROVIDER,
            )
        texts = [str(item) for item in input]
        model_response.data = [
            {"object": "embedding", "index": i, "embedding": hashing_embedding(text)}
            for i, text in enumerate(texts)
        ]
        model_response.model = full_model
        tokens = sum(count_tokens(text) for text in texts)
        model_response.usage = Usage(prompt_tokens=tokens, completion_tokens=0, total_tokens=tokens)
        return model_response


def register_om_local(litellm_module: Any) -> None:
    """Install the local provider in ``litellm.custom_provider_map``, keeping every other provider."""
    others = [p for p in litellm_module.custom_provider_map if p.get("provider") != OM_LOCAL_PROVIDER]
    litellm_module.custom_provider_map = [
        *others,
        {"provider": OM_LOCAL_PROVIDER, "custom_handler": OmLocalLLM()},
    ]
