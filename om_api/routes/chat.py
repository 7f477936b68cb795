"""``POST /v1/chat/completions`` and ``GET /v1/models``: the OpenAI-compatible memory proxy (docs/api.md).

An OpenAI client pointed at ``http://host/v1`` with an om key talks to its model through om. The handler
authenticates the tenant as every route does, reads the thread from ``X-OM-Thread-Id`` (or
``metadata.om_thread_id``), calls one use case and maps its answer; every error, om's own included, is
answered in OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``) so the client raises its
usual exceptions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from om_api.auth import current_tenant
from om_api.errors import ApiError
from om_api.formats import openai_messages
from om_api.json_body import BodyTooDeepError, NotJsonConstantError, contains_nul, load_json_body
from om_api.schemas import ID_PATTERN, ID_RULE
from om_core.application.chat import (
    ChatProxy,
    ChatRequestError,
    ChatTurn,
    TurnStatus,
    chat_completion,
    chat_completion_stream,
)
from om_core.application.context import ObservationFailedError
from om_core.application.ports import (
    ChatModelError,
    MessageConflictError,
    ModelConfigurationError,
    ModelError,
    StoreUnavailableError,
)
from om_core.application.profiles import ProfileNameError, ProfileNotFoundError
from om_core.application.streams import ProfileMismatchError, RecordNotFoundError, ResourceRequiredError

# no JsonBodyRoute: the proxy parses its body itself (``_parse``), to answer in OpenAI's error format
router = APIRouter(prefix="/v1", tags=["openai"])

# the request parameters of OpenAI's chat completions passed to the model; anything else is refused, as
# OpenAI refuses it, and so never reaches litellm's own arguments (a base URL, a key)
PASSED_THROUGH = frozenset(
    {
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "modalities",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "prompt_cache_retention",
        "reasoning_effort",
        "response_format",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "stream_options",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
    }
)
OWN_FIELDS = frozenset({"model", "messages", "stream", "metadata"})
# OpenAI's prompt_cache_retention values; an "auto" idle TTL follows the one a request sends
CACHE_RETENTIONS = ("in_memory", "24h")
_ID = re.compile(ID_PATTERN)
_KINDS = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIError(BaseModel):
    error: OpenAIErrorDetail


class ChatCompletionIn(BaseModel):
    """OpenAI's chat-completions request; om reads the thread from ``metadata.om_thread_id`` when the
    ``X-OM-Thread-Id`` header is absent."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(examples=["om-local/chat"])
    messages: list[dict[str, Any]] = Field(min_length=1)
    stream: bool = False
    metadata: dict[str, str] | None = Field(default=None, examples=[{"om_thread_id": "support-42"}])


class ChatCompletionOut(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    object: str
    created: int
    model: str | None = None
    choices: list[dict[str, Any]]


class ModelOut(BaseModel):
    id: str
    object: str = "model"
    created: int = 0
    owned_by: str


class ModelsOut(BaseModel):
    object: str = "list"
    data: list[ModelOut]


_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": OpenAIError} for code in (400, 401, 404, 409, 413, 429, 502, 503, 504)
}


class _BadRequest(Exception):
    def __init__(self, message: str, *, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param


def openai_error(
    status: int,
    message: str,
    *,
    kind: str | None = None,
    code: str | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    error = {
        "message": message,
        "type": kind or _KINDS.get(status, "api_error" if status >= 500 else "invalid_request_error"),
        "param": param,
        "code": code,
    }
    return JSONResponse({"error": error}, status_code=status, headers=dict(headers or {}))


_HANDLED = (
    ApiError,
    _BadRequest,
    ChatRequestError,
    ChatModelError,
    MessageConflictError,
    ResourceRequiredError,
    RecordNotFoundError,
    ProfileNotFoundError,
    ProfileNameError,
    ProfileMismatchError,
    ObservationFailedError,
    StoreUnavailableError,
    ModelError,
    ModelConfigurationError,
)


def _error_response(error: Exception) -> JSONResponse:
    if isinstance(error, ApiError):
        return openai_error(error.status, error.message, code=error.code, headers=error.headers)
    if isinstance(error, _BadRequest):
        return openai_error(400, error.message, code=error.code, param=error.param)
    if isinstance(error, ChatRequestError):
        return openai_error(error.status, error.message, code=error.code, param=error.param)
    if isinstance(error, ChatModelError):
        return openai_error(error.status, error.message, kind=error.kind, code=error.code, param=error.param)
    if isinstance(error, MessageConflictError):
        return openai_error(409, str(error), code="message_conflict", param="messages")
    if isinstance(error, ResourceRequiredError):
        return openai_error(400, str(error), code="resource_required")
    if isinstance(error, RecordNotFoundError):
        return openai_error(404, str(error), code="thread_not_found")
    if isinstance(error, ProfileNotFoundError | ProfileNameError):
        return openai_error(400, str(error), code="unknown_profile", param="metadata.om_profile")
    if isinstance(error, ProfileMismatchError):
        return openai_error(409, str(error), code="profile_mismatch", param="metadata.om_profile")
    if isinstance(error, ObservationFailedError):
        return openai_error(503, str(error), code="observation_failed", headers={"Retry-After": "5"})
    if isinstance(error, StoreUnavailableError):
        return openai_error(
            503, "the database is unavailable; retry", code="store_unavailable", headers={"Retry-After": "2"}
        )
    return openai_error(
        503, f"a model om needed failed: {error}", code="model_unavailable", headers={"Retry-After": "5"}
    )


def _identifier(value: Any, what: str, param: str) -> str:
    if not isinstance(value, str) or _ID.fullmatch(value) is None:
        raise _BadRequest(
            f"{what} must be {ID_RULE}",
            code=f"invalid_{param.rsplit('.', 1)[-1]}",
            param=param,
        )
    return value


def _parse(raw: bytes) -> dict[str, Any]:
    try:
        body = load_json_body(raw)
    except ValueError:
        raise _BadRequest("the request body is not valid JSON", code="malformed_json") from None
    except (BodyTooDeepError, NotJsonConstantError) as error:
        raise _BadRequest(error.message, code="invalid_body") from None
    if not isinstance(body, dict):
        raise _BadRequest("the request body must be a JSON object", code="invalid_body")
    if contains_nul(body):
        raise _BadRequest("strings must not contain the NUL character (\\u0000)", code="invalid_body")
    unknown = sorted(set(body) - PASSED_THROUGH - OWN_FIELDS)
    if unknown:
        raise _BadRequest(
            f"Unrecognized request argument supplied: {', '.join(unknown)}",
            code="unknown_parameter",
            param=unknown[0],
        )
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise _BadRequest("model is required (a provider/model id)", code="missing_model", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise _BadRequest(
            "messages must be a non-empty array of objects", code="invalid_messages", param="messages"
        )
    if not isinstance(body.get("stream", False), bool):
        raise _BadRequest("stream must be a boolean", code="invalid_stream", param="stream")
    if body.get("prompt_cache_retention") not in (None, *CACHE_RETENTIONS):
        raise _BadRequest(
            f"prompt_cache_retention must be one of {', '.join(CACHE_RETENTIONS)}",
            code="invalid_prompt_cache_retention",
            param="prompt_cache_retention",
        )
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise _BadRequest("metadata must be an object", code="invalid_metadata", param="metadata")
    return body


def _turn(
    body: dict[str, Any],
    tenant: str,
    thread: str | None,
    resource: str | None,
    provider_key: str | None,
    profile: str | None = None,
) -> ChatTurn:
    metadata = body.get("metadata") or {}
    thread = thread if thread is not None else metadata.get("om_thread_id")
    if thread is None:
        raise _BadRequest(
            "om needs the conversation's thread: send the X-OM-Thread-Id header or metadata.om_thread_id",
            code="missing_thread_id",
            param="metadata.om_thread_id",
        )
    resource = resource if resource is not None else metadata.get("om_resource_id")
    profile = profile if profile is not None else metadata.get("om_profile")
    if profile is not None and not isinstance(profile, str):
        raise _BadRequest(
            "the profile must be a string", code="invalid_om_profile", param="metadata.om_profile"
        )
    return ChatTurn(
        tenant=tenant,
        thread_id=_identifier(thread, "the thread id", "metadata.om_thread_id"),
        model=body["model"],
        messages=body["messages"],
        options={k: v for k, v in body.items() if k in PASSED_THROUGH},
        resource_id=None
        if resource is None
        else _identifier(resource, "the resource id", "metadata.om_resource_id"),
        provider_key=provider_key.strip() if provider_key and provider_key.strip() else None,
        profile=profile,
    )


_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")


def _idempotency_key(value: str | None) -> str | None:
    if value is None:
        return None
    if not _IDEMPOTENCY_KEY.fullmatch(value):
        raise _BadRequest(
            "Idempotency-Key must be 1 to 255 printable ASCII characters without spaces",
            code="invalid_idempotency_key",
            param="Idempotency-Key",
        )
    return value


def _status_headers(thread_id: str, status: TurnStatus) -> dict[str, str]:
    headers = {
        "X-OM-Thread-Id": thread_id,
        "X-OM-Version": str(status.version),
        "X-OM-Pending-Tokens": str(status.pending_tokens),
        "X-OM-Observation-Tokens": str(status.observation_tokens),
        "X-OM-Generation": str(status.generation),
        "X-OM-Appended": str(status.appended),
    }
    if status.replayed:
        # Stripe's name for an answer given again to a repeated request
        headers["Idempotent-Replayed"] = "true"
    return headers


def _events(chunks: Iterator[dict[str, Any]]) -> Iterator[str]:
    """Server-sent events as OpenAI sends them; a failure once the stream is open is an ``error`` event,
    which OpenAI's clients raise."""
    try:
        for chunk in chunks:
            yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
    except _HANDLED as error:
        body = _error_response(error).body
        yield f"data: {bytes(body).decode()}\n\n"
        return
    yield "data: [DONE]\n\n"


@router.post(
    "/chat/completions",
    response_model=ChatCompletionOut,
    responses={
        **_ERRORS,
        200: {"content": {"text/event-stream": {}}, "description": "a completion, or its chunks"},
    },
    summary="OpenAI-compatible chat completions, with the thread's memory",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ChatCompletionIn.model_json_schema()}},
        }
    },
)
async def chat_completions(
    request: Request,
    x_om_thread_id: Annotated[str | None, Header(description="the thread (or metadata.om_thread_id)")] = None,
    x_om_resource_id: Annotated[str | None, Header(description="the thread's resource")] = None,
    x_om_profile: Annotated[
        str | None, Header(description="the named memory profile (or metadata.om_profile)")
    ] = None,
    x_om_provider_key: Annotated[
        str | None, Header(description="the provider's key, when OM_CHAT_FORWARD_PROVIDER_KEY allows it")
    ] = None,
    idempotency_key: Annotated[
        str | None,
        Header(description="a repeat of a request with this key answers its stored reply (1–255 characters)"),
    ] = None,
    x_om_regenerate: Annotated[
        bool, Header(description="a new answer even if the sent messages are answered already")
    ] = False,
) -> Response:
    try:
        tenant = await current_tenant(request)
        body = _parse(await request.body())
        turn = _turn(body, tenant, x_om_thread_id, x_om_resource_id, x_om_provider_key, x_om_profile)
        turn = replace(turn, idempotency_key=_idempotency_key(idempotency_key), regenerate=x_om_regenerate)
        deps, proxy = request.app.state.deps, request.app.state.chat_proxy
        if body.get("stream") is True:
            streamed = await run_in_threadpool(chat_completion_stream, deps, proxy, turn, openai_messages)
            return StreamingResponse(
                _events(streamed.chunks),
                media_type="text/event-stream",
                headers={
                    **_status_headers(turn.thread_id, streamed.status),
                    "Cache-Control": "no-cache",
                    "X-Accel-Buffering": "no",
                },
            )
        answer = await run_in_threadpool(chat_completion, deps, proxy, turn, openai_messages)
        return JSONResponse(answer.body, headers=_status_headers(turn.thread_id, answer.status))
    except _HANDLED as error:
        return _error_response(error)


@router.get("/models", response_model=ModelsOut, responses=_ERRORS, summary="the models the proxy offers")
async def list_models(request: Request) -> Response:
    try:
        await current_tenant(request)
    except ApiError as error:
        return _error_response(error)
    proxy: ChatProxy = request.app.state.chat_proxy
    data = [{"id": m, "object": "model", "created": 0, "owned_by": m.split("/", 1)[0]} for m in proxy.offered]
    return JSONResponse({"object": "list", "data": data})
