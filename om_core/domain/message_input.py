"""Normalisation of client messages into ``Message``, and the stored JSON form of a message.

Clients send OpenAI chat messages or AI SDK UI messages (v4 and v5 part shapes); both become the same
``Message``. Every rejection names the JSON path of the offending field so an API can echo it back.
Timestamps are kept at millisecond precision because that is what the stored form carries: a message read
back from storage must equal the one that was appended.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from om_core.domain.json_text import sorted_json
from om_core.domain.messages import (
    ROLES,
    DataPart,
    FilePart,
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolInvocationPart,
    ToolState,
)
from om_core.domain.tokens import client_token_estimate

MAX_ID_LENGTH = 256
MESSAGE_TEXT_LIMIT = 100_000
DEFAULT_PATH_PREFIX = "message"

ImageDetail = Literal["low", "high", "auto"]

_CONTROL_CHARS = re.compile("[\x00-\x1f\x7f-\x9f]")
_DETAILS = ("low", "high", "auto")
_MEDIA_RESOLUTIONS = ("low", "medium", "high", "ultra_high", "unspecified")
_ROLE_ALIASES = {"developer": "system"}  # OpenAI's newer name for the system role
_OPENAI_FILE_ID_SCHEME = "openai-file:"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# AI SDK v4 / stored states are ours already; v5 ``tool-<name>`` states are mapped onto them
_TOOL_STATES: dict[str, ToolState] = {
    "partial-call": "partial-call",
    "call": "call",
    "result": "result",
    "error": "error",
    "approval-requested": "approval-requested",
    "approval-responded": "approval-responded",
    "output-denied": "output-denied",
    "input-streaming": "partial-call",
    "input-available": "call",
    "output-available": "result",
    "output-error": "error",
}

# only consulted when a client sends bytes without a media type, so size heuristics (PDF pricing) still apply
_MIME_BY_EXTENSION = {
    "pdf": "application/pdf",
    "txt": "text/plain",
    "md": "text/markdown",
    "csv": "text/csv",
    "html": "text/html",
    "json": "application/json",
    "xml": "application/xml",
    "yaml": "application/yaml",
    "yml": "application/yaml",
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
}


class MessageValidationError(ValueError):
    """A client message that cannot be accepted; ``path`` is the JSON path of the offending field."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


# --- field readers ------------------------------------------------------------------------------------------


def _at(path: str, key: str | int) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key


def _opt_str(d: Mapping[str, Any], key: str, path: str) -> str | None:
    value = d.get(key)
    if value is not None and not isinstance(value, str):
        raise MessageValidationError(_at(path, key), "must be a string")
    return value


def _req_str(d: Mapping[str, Any], key: str, path: str, *, non_empty: bool = False) -> str:
    value = d.get(key)
    if value is None:
        raise MessageValidationError(_at(path, key), "is required")
    if not isinstance(value, str):
        raise MessageValidationError(_at(path, key), "must be a string")
    if non_empty and not value:
        raise MessageValidationError(_at(path, key), "must not be empty")
    return value


def _opt_mapping(d: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any] | None:
    value = d.get(key)
    if value is not None and not isinstance(value, Mapping):
        raise MessageValidationError(_at(path, key), "must be an object")
    return value


def _first_present(d: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((key for key in keys if d.get(key) is not None), None)


def _opt_dimension(d: Mapping[str, Any], key: str, path: str) -> int | None:
    value = d.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise MessageValidationError(_at(path, key), "must be a positive integer")
    return value


def _opt_size(d: Mapping[str, Any], path: str) -> int | None:
    value = d.get("sizeBytes")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MessageValidationError(_at(path, "sizeBytes"), "must be a non-negative integer")
    return value


def _check_id(value: Any, path: str) -> str:
    if value is None:
        raise MessageValidationError(path, "is required")
    if not isinstance(value, str):
        raise MessageValidationError(path, "must be a string")
    if not 1 <= len(value) <= MAX_ID_LENGTH:
        raise MessageValidationError(path, f"must be 1 to {MAX_ID_LENGTH} characters long (got {len(value)})")
    if _CONTROL_CHARS.search(value):
        raise MessageValidationError(path, "must not contain control characters")
    return value


def _truncate_ms(moment: datetime) -> datetime:
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def _parse_timestamp(value: Any, path: str) -> datetime:
    if isinstance(value, str):
        try:
            return _truncate_ms(datetime.fromisoformat(value))
        except (ValueError, OverflowError):
            pass
    elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        try:
            return _truncate_ms(_EPOCH + timedelta(milliseconds=value))
        except OverflowError:
            pass
    raise MessageValidationError(path, "must be an ISO 8601 timestamp or epoch milliseconds")


def _opt_timestamp(d: Mapping[str, Any], path: str) -> datetime | None:
    key = _first_present(d, ("createdAt", "created_at"))
    return None if key is None else _parse_timestamp(d[key], _at(path, key))


def _provider_option(part: Mapping[str, Any], provider: str, keys: tuple[str, ...]) -> Any:
    for container in ("providerOptions", "providerMetadata"):
        options = part.get(container)
        scoped = options.get(provider) if isinstance(options, Mapping) else None
        if isinstance(scoped, Mapping):
            for key in keys:
                if scoped.get(key) is not None:
                    return scoped[key]
    return None


def _choice(value: Any, allowed: tuple[str, ...], path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in allowed:
        raise MessageValidationError(path, f"must be one of {', '.join(allowed)}")
    return value


def _detail(value: Any, path: str) -> ImageDetail | None:
    return cast(ImageDetail | None, _choice(value, _DETAILS, path))


def _token_estimate(part: Mapping[str, Any], path: str) -> int | None:
    try:
        return client_token_estimate(part.get("providerMetadata"))
    except ValueError as exc:
        raise MessageValidationError(
            _at(path, "providerMetadata.mastra.tokenEstimate.tokens"), str(exc)
        ) from None


# --- attachments --------------------------------------------------------------------------------------------

_BARE_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_WINDOWS_PATH = re.compile(r"[A-Za-z]:[\\/]")


def _is_bare_base64(value: str) -> bool:
    if len(value) < 16 or len(value) % 4:
        return False
    if value.startswith(("/", "./", "../", "~/")) or _WINDOWS_PATH.match(value) or "\\" in value:
        return False
    return _BARE_BASE64.fullmatch(value) is not None


def _data_uri_mime(url: str) -> str | None:
    if not url.startswith("data:"):
        return None
    ends = [i for i in (url.find(";"), url.find(",")) if i != -1]
    end = min(ends) if ends else -1
    return url[5:end] if end > 5 else None


def _mime_from_filename(filename: str | None) -> str | None:
    if not filename or "." not in filename:
        return None
    return _MIME_BY_EXTENSION.get(filename.rsplit(".", 1)[1].lower())


def _attachment_url(value: str, mime_type: str | None, fallback_mime: str) -> str:
    """Bare base64 becomes a data URI, so a stored attachment is always a URL, a data URI or an opaque
    reference and its byte size is known exactly when its bytes are inline."""
    if value.startswith("data:") or not _is_bare_base64(value):
        return value
    return f"data:{mime_type or fallback_mime};base64,{value}"


def _image_part(part: Mapping[str, Any], path: str) -> ImagePart:
    key = _first_present(part, ("url", "image", "data"))
    if key is None:
        raise MessageValidationError(_at(path, "url"), "is required")
    raw_url = _req_str(part, key, path, non_empty=True)
    mime = _opt_str(part, "mimeType", path) or _opt_str(part, "mediaType", path)
    dimensions = _mapping_at(part, ("providerMetadata", "mastra", "imageDimensions"))
    dimensions_path = _at(path, "providerMetadata.mastra.imageDimensions")
    detail_key = _first_present(part, ("detail", "imageDetail"))
    detail = part[detail_key] if detail_key else _provider_option(part, "openai", ("detail", "imageDetail"))
    resolution = part.get("mediaResolution") or _provider_option(part, "google", ("mediaResolution",))
    return ImagePart(
        url=_attachment_url(raw_url, mime, "image/png"),
        mime_type=mime or _data_uri_mime(raw_url),
        filename=_opt_str(part, "filename", path),
        detail=_detail(detail, _at(path, detail_key or "providerOptions.openai.detail")),
        width=_opt_dimension(part, "width", path) or _opt_dimension(dimensions, "width", dimensions_path),
        height=_opt_dimension(part, "height", path) or _opt_dimension(dimensions, "height", dimensions_path),
        size_bytes=_opt_size(part, path),
        token_estimate=_token_estimate(part, path),
        media_resolution=_choice(resolution, _MEDIA_RESOLUTIONS, _at(path, "mediaResolution")),
        created_at=_opt_timestamp(part, path),
    )


def _mapping_at(value: Mapping[str, Any], keys: tuple[str, ...]) -> Mapping[str, Any]:
    current: Any = value
    for key in keys:
        current = current.get(key) if isinstance(current, Mapping) else None
    return current if isinstance(current, Mapping) else {}


def _file_part(part: Mapping[str, Any], path: str) -> FilePart:
    key = _first_present(part, ("url", "data"))
    if key is None:
        raise MessageValidationError(_at(path, "url"), "is required")
    raw_url = _req_str(part, key, path, non_empty=True)
    filename = _opt_str(part, "filename", path)
    mime = (
        _opt_str(part, "mediaType", path)
        or _opt_str(part, "mimeType", path)
        or _data_uri_mime(raw_url)
        or _mime_from_filename(filename)
        or "application/octet-stream"
    )
    return FilePart(
        url=_attachment_url(raw_url, mime, mime),
        mime_type=mime,
        filename=filename,
        size_bytes=_opt_size(part, path),
        token_estimate=_token_estimate(part, path),
        created_at=_opt_timestamp(part, path),
    )


def _openai_image_part(part: Mapping[str, Any], path: str) -> ImagePart:
    image = part.get("image_url")
    if isinstance(image, str):
        return ImagePart(url=_check_non_empty(image, _at(path, "image_url")), mime_type=_data_uri_mime(image))
    if not isinstance(image, Mapping):
        raise MessageValidationError(_at(path, "image_url"), "must be an object with a url")
    image_path = _at(path, "image_url")
    url = _req_str(image, "url", image_path, non_empty=True)
    return ImagePart(
        url=url,
        mime_type=_data_uri_mime(url),
        detail=_detail(image.get("detail"), _at(image_path, "detail")),
    )


def _check_non_empty(value: str, path: str) -> str:
    if not value:
        raise MessageValidationError(path, "must not be empty")
    return value


def _openai_file_part(file: Mapping[str, Any], path: str) -> FilePart:
    filename = _opt_str(file, "filename", path)
    file_data = _opt_str(file, "file_data", path)
    if file_data:
        mime = _data_uri_mime(file_data) or _mime_from_filename(filename) or "application/octet-stream"
        return FilePart(url=_attachment_url(file_data, mime, mime), mime_type=mime, filename=filename)
    file_id = _opt_str(file, "file_id", path)
    if file_id:
        mime = _mime_from_filename(filename) or "application/octet-stream"
        return FilePart(url=_OPENAI_FILE_ID_SCHEME + file_id, mime_type=mime, filename=filename)
    raise MessageValidationError(path, "needs file_data or file_id")


# --- tool invocations ---------------------------------------------------------------------------------------


def _tool_state(value: Any, path: str) -> ToolState:
    if value is None:
        raise MessageValidationError(path, "is required")
    if not isinstance(value, str) or value not in _TOOL_STATES:
        raise MessageValidationError(path, f"unknown tool state {value!r}")
    return _TOOL_STATES[value]


def _approval(fields: Mapping[str, Any], path: str) -> dict[str, Any] | None:
    approval = _opt_mapping(fields, "approval", path)
    return dict(approval) if approval is not None else None


def _tool_invocation(fields: Mapping[str, Any], path: str, created_at: datetime | None) -> ToolInvocationPart:
    """AI SDK v4 ``toolInvocation`` (nested or flat): ``toolCallId``, ``toolName``, ``state``, ``args``,
    ``result``."""
    error_key = _first_present(fields, ("error", "errorText"))
    return ToolInvocationPart(
        tool_call_id=_check_id(fields.get("toolCallId"), _at(path, "toolCallId")),
        tool_name=_req_str(fields, "toolName", path, non_empty=True),
        state=_tool_state(fields.get("state"), _at(path, "state")),
        args=fields.get("args"),
        result=fields.get("result"),
        error=_opt_str(fields, error_key, path) if error_key else None,
        approval=_approval(fields, path),
        created_at=created_at,
    )


def _v5_tool_part(part: Mapping[str, Any], tool_name: str, path: str) -> ToolInvocationPart:
    """AI SDK v5 ``tool-<name>`` / ``dynamic-tool``: ``input``/``output``/``errorText`` by state."""
    return ToolInvocationPart(
        tool_call_id=_check_id(part.get("toolCallId"), _at(path, "toolCallId")),
        tool_name=tool_name,
        state=_tool_state(part.get("state"), _at(path, "state")),
        args=part.get("input"),
        result=part.get("output"),
        error=_opt_str(part, "errorText", path),
        approval=_approval(part, path),
        created_at=_opt_timestamp(part, path),
    )


def _openai_tool_calls(value: Any, path: str) -> list[Part]:
    if not isinstance(value, list):
        raise MessageValidationError(path, "must be an array")
    parts: list[Part] = []
    for index, call in enumerate(value):
        call_path = _at(path, index)
        if not isinstance(call, Mapping):
            raise MessageValidationError(call_path, "must be an object")
        if call.get("type", "function") != "function":
            raise MessageValidationError(_at(call_path, "type"), "only function tool calls are supported")
        function = _opt_mapping(call, "function", call_path)
        function_path = _at(call_path, "function")
        if function is None:
            raise MessageValidationError(function_path, "is required")
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                args: Any = json.loads(arguments)
            except ValueError:
                # models do emit broken JSON; the raw text is still what the model saw
                args = arguments
        elif arguments is None or isinstance(arguments, Mapping):
            args = arguments
        else:
            raise MessageValidationError(_at(function_path, "arguments"), "must be a JSON string")
        parts.append(
            ToolInvocationPart(
                tool_call_id=_check_id(call.get("id"), _at(call_path, "id")),
                tool_name=_req_str(function, "name", function_path, non_empty=True),
                state="call",
                args=args,
            )
        )
    return parts


# --- parts --------------------------------------------------------------------------------------------------


def _part(raw: Any, path: str) -> Part | None:
    """One part in any accepted shape; ``None`` for parts that carry nothing (``step-start``)."""
    if not isinstance(raw, Mapping):
        raise MessageValidationError(path, "must be an object")
    kind = raw.get("type")
    if not isinstance(kind, str):
        raise MessageValidationError(_at(path, "type"), "must be a string")
    if kind == "text":
        return TextPart(text=_req_str(raw, "text", path), created_at=_opt_timestamp(raw, path))
    if kind == "refusal":
        return TextPart(text=_req_str(raw, "refusal", path))
    if kind == "image":
        return _image_part(raw, path)
    if kind == "image_url":
        return _openai_image_part(raw, path)
    if kind == "file":
        openai_file = raw.get("file")
        if isinstance(openai_file, Mapping):
            return _openai_file_part(openai_file, _at(path, "file"))
        return _file_part(raw, path)
    if kind == "input_audio":
        raise MessageValidationError(_at(path, "type"), "audio input (input_audio) is not supported")
    if kind == "reasoning":
        key = "text" if "text" in raw else "reasoning"
        return ReasoningPart(text=_req_str(raw, key, path), created_at=_opt_timestamp(raw, path))
    if kind == "tool-invocation":
        nested = _opt_mapping(raw, "toolInvocation", path)
        fields, fields_path = (nested, _at(path, "toolInvocation")) if nested is not None else (raw, path)
        return _tool_invocation(fields, fields_path, _opt_timestamp(raw, path))
    if kind == "dynamic-tool":
        return _v5_tool_part(raw, _req_str(raw, "toolName", path, non_empty=True), path)
    if kind.startswith("tool-") and len(kind) > len("tool-"):
        return _v5_tool_part(raw, kind[len("tool-") :], path)
    if kind.startswith("data-") and len(kind) > len("data-"):
        return DataPart(type=kind, data=raw.get("data"), created_at=_opt_timestamp(raw, path))
    if kind == "step-start":
        return None
    raise MessageValidationError(_at(path, "type"), f"unknown part type {kind!r}")


def _parts(value: Any, path: str, on_step_start: Callable[[Mapping[str, Any]], None]) -> list[Part]:
    if not isinstance(value, list):
        raise MessageValidationError(path, "must be an array")
    parts: list[Part] = []
    for index, raw in enumerate(value):
        part = _part(raw, _at(path, index))
        if part is not None:
            parts.append(part)
        elif isinstance(raw, Mapping):
            on_step_start(raw)
    return parts


def _attachments(value: Any, path: str) -> list[Part]:
    """AI SDK v4's ``experimental_attachments`` (``{url, name?, contentType?}``, also inside Mastra's stored
    format 2) as the image and file parts they stand for: an image when its type (given, from a data URI,
    or from the name's extension) is an image's, else a file."""
    if not isinstance(value, list):
        raise MessageValidationError(path, "must be an array of attachments")
    parts: list[Part] = []
    for index, raw in enumerate(value):
        item_path = _at(path, index)
        if not isinstance(raw, Mapping):
            raise MessageValidationError(item_path, "must be an object with a url")
        url = _req_str(raw, "url", item_path, non_empty=True)
        name = _opt_str(raw, "name", item_path)
        content_type = _opt_str(raw, "contentType", item_path)
        mime = (
            content_type
            or _data_uri_mime(url)
            or _mime_from_filename(name)
            or _mime_from_filename(urlsplit(url).path.rsplit("/", 1)[-1])
        )
        part: dict[str, Any] = {"url": url, "mediaType": mime, "filename": name}
        if mime is not None and mime.startswith("image/"):
            parts.append(_image_part(part, item_path))
        else:
            parts.append(_file_part(part, item_path))
    return parts


def _tool_message_parts(raw: Mapping[str, Any], content: Any, prefix: str) -> list[Part]:
    """An OpenAI ``tool`` message: the result of one call, kept as a ``result`` tool invocation."""
    if isinstance(content, list):
        texts = []
        for index, item in enumerate(content):
            item_path = _at(_at(prefix, "content"), index)
            if not isinstance(item, Mapping) or item.get("type") != "text":
                raise MessageValidationError(item_path, "tool message content parts must be text parts")
            texts.append(_req_str(item, "text", item_path))
        result: Any = "".join(texts)
    elif isinstance(content, str) or content is None:
        result = content
    else:
        raise MessageValidationError(_at(prefix, "content"), "must be a string or an array of text parts")
    return [
        ToolInvocationPart(
            tool_call_id=_check_id(raw.get("tool_call_id"), _at(prefix, "tool_call_id")),
            tool_name=_opt_str(raw, "name", prefix) or "",
            state="result",
            result=result,
        )
    ]


def _model(
    raw: Mapping[str, Any], metadata: Mapping[str, Any], step_models: list[Any], prefix: str
) -> str | None:
    """The provider/model of an assistant message, in order: ``model``, ``metadata.model``,
    ``metadata.provider``/``modelId``, the model of the last ``step-start`` part."""
    model = _opt_str(raw, "model", prefix)
    if model:
        return model
    if isinstance(metadata.get("model"), str) and metadata["model"]:
        return cast(str, metadata["model"])
    model_id, provider = metadata.get("modelId"), metadata.get("provider")
    if isinstance(model_id, str) and model_id:
        return f"{provider}/{model_id}" if isinstance(provider, str) and provider else model_id
    for step_model in reversed(step_models):
        if isinstance(step_model, str) and step_model:
            return step_model
        if isinstance(step_model, Mapping) and isinstance(step_model.get("modelId"), str):
            step_provider = step_model.get("provider")
            if isinstance(step_provider, str) and step_provider:
                return f"{step_provider}/{step_model['modelId']}"
            return cast(str, step_model["modelId"])
    return None


def normalize_message(
    raw: Mapping[str, Any],
    *,
    now: datetime,
    max_bytes: int,
    thread_id: str | None = None,
    path_prefix: str = DEFAULT_PATH_PREFIX,
) -> tuple[Message, dict[str, Any]]:
    """One client message (OpenAI chat or AI SDK UI format) as a ``Message``, with its stored form
    (``message_to_json``) beside it: the size check builds that form, and callers store, hash and compare
    the same one rather than build it again.

    A missing ``id`` gets a fresh uuid4 (ids are idempotency keys, so clients should send them); a missing
    ``createdAt`` becomes ``now``. ``thread_id`` is the thread the message is appended to; a message naming
    another thread is rejected. Raises ``MessageValidationError`` naming the path under ``path_prefix``.
    """
    prefix = path_prefix
    if not isinstance(raw, Mapping):
        raise MessageValidationError(prefix, "must be a JSON object")

    role_value = raw.get("role")
    if not isinstance(role_value, str):
        raise MessageValidationError(_at(prefix, "role"), "is required and must be a string")
    role = _ROLE_ALIASES.get(role_value, role_value)
    if role not in ROLES:
        raise MessageValidationError(
            _at(prefix, "role"), f"unknown role {role_value!r} (expected one of {', '.join(ROLES)})"
        )

    message_id = str(uuid.uuid4()) if raw.get("id") is None else _check_id(raw["id"], _at(prefix, "id"))
    created_at = _opt_timestamp(raw, prefix) or _truncate_ms(now)

    thread_key = _first_present(raw, ("threadId", "thread_id"))
    message_thread = _check_id(raw[thread_key], _at(prefix, thread_key)) if thread_key else None
    if message_thread is not None and thread_id is not None and message_thread != thread_id:
        raise MessageValidationError(
            _at(prefix, cast(str, thread_key)),
            f"names thread {message_thread!r} but is sent to {thread_id!r}",
        )

    metadata = dict(_opt_mapping(raw, "metadata", prefix) or {})

    step_models: list[Any] = []
    attached: list[tuple[Any, str]] = []
    if raw.get("experimental_attachments") is not None:
        attached.append((raw["experimental_attachments"], _at(prefix, "experimental_attachments")))
    content_path = _at(prefix, "parts")
    if raw.get("parts") is not None:
        parts = _parts(raw["parts"], content_path, lambda step: step_models.append(step.get("model")))
    else:
        content = raw.get("content")
        content_path = _at(prefix, "content")
        if role == "tool" and (raw.get("tool_call_id") is not None or isinstance(content, str)):
            parts = _tool_message_parts(raw, content, prefix)
        elif isinstance(content, str):
            parts = [TextPart(text=content)] if content else []
        elif isinstance(content, list):
            parts = _parts(content, content_path, lambda step: step_models.append(step.get("model")))
        elif isinstance(content, Mapping) and content.get("parts") is not None:
            # Mastra's stored format nests the parts: {format: 2, parts: [...], experimental_attachments}
            if content.get("experimental_attachments") is not None:
                attached.append(
                    (content["experimental_attachments"], _at(content_path, "experimental_attachments"))
                )
            content_path = _at(content_path, "parts")
            parts = _parts(content["parts"], content_path, lambda step: step_models.append(step.get("model")))
        elif content is None:
            parts = []
        else:
            raise MessageValidationError(content_path, "must be a string, an array of parts or null")

    # attachments come after the message's own content, as the AI SDK sends them to a model
    for attachments, attachments_path in attached:
        parts.extend(_attachments(attachments, attachments_path))

    if raw.get("tool_calls") is not None:
        if role != "assistant":
            raise MessageValidationError(
                _at(prefix, "tool_calls"), "only assistant messages may carry tool calls"
            )
        parts.extend(_openai_tool_calls(raw["tool_calls"], _at(prefix, "tool_calls")))
    refusal = _opt_str(raw, "refusal", prefix) if role == "assistant" else None
    if refusal:
        parts.append(TextPart(text=refusal))

    if not parts:
        raise MessageValidationError(content_path, "message has no content")
    if all(isinstance(p, TextPart) and not p.text.strip() for p in parts):
        raise MessageValidationError(content_path, "message content is only whitespace")

    name = _opt_str(raw, "name", prefix) if role != "tool" else None
    if name:
        metadata.setdefault("name", name)

    message = Message(
        id=message_id,
        role=role,
        parts=tuple(parts),
        created_at=created_at,
        thread_id=message_thread or thread_id,
        model=_model(raw, metadata, step_models, prefix) if role == "assistant" else None,
        metadata=metadata,
    )
    stored = message_to_json(message)
    try:
        size = len(canonical_json(stored).encode("utf-8"))
    except UnicodeEncodeError:
        raise MessageValidationError(prefix, "contains unpaired UTF-16 surrogates") from None
    except (TypeError, ValueError) as exc:
        raise MessageValidationError(prefix, f"is not representable as JSON ({exc})") from None
    if size > max_bytes:
        raise MessageValidationError(
            prefix, f"message is {size} bytes as JSON, over the limit of {max_bytes} bytes"
        )
    return message, stored


# --- stored form --------------------------------------------------------------------------------------------


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, no NaN/Infinity (which stored JSON cannot hold)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def format_timestamp(moment: datetime) -> str:
    """ISO 8601 UTC with milliseconds, e.g. ``2025-01-02T03:04:05.678Z``."""
    utc = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}"
        f".{utc.microsecond // 1000:03d}Z"
    )


def _without_none(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


def _part_to_json(part: Part) -> dict[str, Any]:
    created = format_timestamp(part.created_at) if part.created_at is not None else None
    if isinstance(part, TextPart | ReasoningPart):
        return _without_none({"type": part.type, "text": part.text, "createdAt": created})
    if isinstance(part, ImagePart):
        return _without_none(
            {
                "type": "image",
                "url": part.url,
                "mimeType": part.mime_type,
                "filename": part.filename,
                "detail": part.detail,
                "width": part.width,
                "height": part.height,
                "sizeBytes": part.size_bytes,
                "tokenEstimate": part.token_estimate,
                "mediaResolution": part.media_resolution,
                "createdAt": created,
            }
        )
    if isinstance(part, FilePart):
        return _without_none(
            {
                "type": "file",
                "url": part.url,
                "mimeType": part.mime_type,
                "filename": part.filename,
                "sizeBytes": part.size_bytes,
                "tokenEstimate": part.token_estimate,
                "createdAt": created,
            }
        )
    if isinstance(part, ToolInvocationPart):
        return _without_none(
            {
                "type": "tool-invocation",
                "toolCallId": part.tool_call_id,
                "toolName": part.tool_name,
                "state": part.state,
                "args": part.args,
                "result": part.result,
                "error": part.error,
                "approval": part.approval,
                "createdAt": created,
            }
        )
    return _without_none({"type": part.type, "data": part.data, "createdAt": created})


def message_to_json(message: Message) -> dict[str, Any]:
    """The stored form: camelCase keys, ISO 8601 UTC timestamps with milliseconds, absent fields omitted."""
    return _without_none(
        {
            "id": message.id,
            "role": message.role,
            "createdAt": format_timestamp(message.created_at),
            "threadId": message.thread_id,
            "model": message.model,
            "metadata": message.metadata or None,
            "parts": [_part_to_json(part) for part in message.parts],
        }
    )


def _stored_time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def _part_from_json(d: Mapping[str, Any]) -> Part:
    kind = d["type"]
    created = _stored_time(d.get("createdAt"))
    if kind == "text":
        return TextPart(text=d["text"], created_at=created)
    if kind == "reasoning":
        return ReasoningPart(text=d["text"], created_at=created)
    if kind == "image":
        return ImagePart(
            url=d["url"],
            mime_type=d.get("mimeType"),
            filename=d.get("filename"),
            detail=d.get("detail"),
            width=d.get("width"),
            height=d.get("height"),
            size_bytes=d.get("sizeBytes"),
            token_estimate=d.get("tokenEstimate"),
            media_resolution=d.get("mediaResolution"),
            created_at=created,
        )
    if kind == "file":
        return FilePart(
            url=d["url"],
            mime_type=d["mimeType"],
            filename=d.get("filename"),
            size_bytes=d.get("sizeBytes"),
            token_estimate=d.get("tokenEstimate"),
            created_at=created,
        )
    if kind == "tool-invocation":
        return ToolInvocationPart(
            tool_call_id=d["toolCallId"],
            tool_name=d["toolName"],
            state=d["state"],
            args=d.get("args"),
            result=d.get("result"),
            error=d.get("error"),
            approval=d.get("approval"),
            created_at=created,
        )
    return DataPart(type=kind, data=d.get("data"), created_at=created)


def message_from_json(d: Mapping[str, Any]) -> Message:
    """Inverse of ``message_to_json``; trusts its input (it was validated when it was appended)."""
    return Message(
        id=d["id"],
        role=d["role"],
        parts=tuple(_part_from_json(part) for part in d["parts"]),
        created_at=datetime.fromisoformat(d["createdAt"]),
        thread_id=d.get("threadId"),
        model=d.get("model"),
        metadata=dict(d.get("metadata") or {}),
    )


def content_hash(stored: Mapping[str, Any]) -> str:
    """sha256 of what a message says, from its stored form (``message_to_json``): role, parts, createdAt
    and model (not its id, thread or metadata).

    The same id with the same hash is a duplicate delivery; with another hash, a conflict. A message sent
    without ``createdAt`` is stamped with the server's clock, so to compare a re-delivery against a stored
    message, hash it with ``createdAt`` set to the stored one.
    """
    subject = {key: stored.get(key) for key in ("role", "parts", "createdAt", "model")}
    # a stored form holds only what JSON holds (the size check wrote it with the strict encoder, or it was
    # read back from the store), so the faster writer of the same text serves
    return hashlib.sha256(sorted_json(subject).encode("utf-8")).hexdigest()


def message_text(message: Message) -> str:
    """Plain text for search indexing: text parts, tool names and tool results, at most 100k characters."""
    pieces: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, ToolInvocationPart):
            if part.tool_name:
                pieces.append(part.tool_name)
            if part.result is not None:
                result = part.result
                pieces.append(result if isinstance(result, str) else json.dumps(result, ensure_ascii=False))
            if part.error:
                pieces.append(part.error)
    return "\n".join(pieces)[:MESSAGE_TEXT_LIMIT]
