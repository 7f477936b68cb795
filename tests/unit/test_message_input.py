from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from om_core.domain.message_input import (
    MessageValidationError,
    content_hash,
    message_from_json,
    message_text,
    message_to_json,
    normalize_message,
)
from om_core.domain.messages import (
    DataPart,
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolInvocationPart,
)
from om_core.domain.tokens import TokenCounter, make_tokenizer

NOW = datetime(2025, 3, 4, 5, 6, 7, 891234, tzinfo=UTC)
LIMIT = 1_000_000


def norm(raw: dict[str, Any], **kwargs: Any) -> Message:
    kwargs.setdefault("now", NOW)
    kwargs.setdefault("max_bytes", LIMIT)
    return normalize_message(raw, **kwargs)[0]


def rejected(raw: Any, **kwargs: Any) -> MessageValidationError:
    with pytest.raises(MessageValidationError) as info:
        norm(raw, **kwargs)
    return info.value


# --- OpenAI chat format -------------------------------------------------------------------------------------


def test_openai_string_content_becomes_one_text_part() -> None:
    m = norm({"id": "m1", "role": "user", "content": "Hello world", "name": "alice"})
    assert m.id == "m1"
    assert m.role == "user"
    assert m.parts == (TextPart(text="Hello world"),)
    assert m.metadata == {"name": "alice"}
    assert m.model is None


def test_openai_content_parts_text_image_and_files() -> None:
    pdf = "data:application/pdf;base64,JVBERi0xLjQK"
    m = norm(
        {
            "id": "m1",
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "https://x.test/cat.png", "detail": "high"}},
                {"type": "file", "file": {"file_data": pdf, "filename": "a.pdf"}},
                {"type": "file", "file": {"file_id": "file-abc", "filename": "b.pdf"}},
            ],
        }
    )
    assert m.parts == (
        TextPart(text="look"),
        ImagePart(url="https://x.test/cat.png", detail="high"),
        FilePart(url=pdf, mime_type="application/pdf", filename="a.pdf"),
        FilePart(url="openai-file:file-abc", mime_type="application/pdf", filename="b.pdf"),
    )


def test_openai_assistant_tool_calls_parse_json_arguments_and_keep_invalid_json_raw() -> None:
    m = norm(
        {
            "id": "a1",
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q": "unterminated'},
                },
            ],
        }
    )
    assert m.parts == (
        ToolInvocationPart(tool_call_id="c1", tool_name="weather", state="call", args={"city": "Paris"}),
        ToolInvocationPart(tool_call_id="c2", tool_name="search", state="call", args='{"q": "unterminated'),
    )


def test_openai_tool_message_becomes_a_tool_result_invocation() -> None:
    m = norm({"id": "t1", "role": "tool", "tool_call_id": "c1", "name": "weather", "content": '{"temp": 21}'})
    assert m.role == "tool"
    assert m.parts == (
        ToolInvocationPart(tool_call_id="c1", tool_name="weather", state="result", result='{"temp": 21}'),
    )


def test_openai_developer_role_is_a_system_message() -> None:
    assert norm({"id": "s", "role": "developer", "content": "be brief"}).role == "system"


# --- AI SDK UI format ---------------------------------------------------------------------------------------


def test_ui_parts_of_every_kind() -> None:
    estimate = {"mastra": {"tokenEstimate": {"v": 0, "source": "client", "key": "client", "tokens": 1234}}}
    m = norm(
        {
            "id": "u1",
            "role": "assistant",
            "createdAt": "2025-01-02T03:04:05.678Z",
            "parts": [
                {"type": "step-start"},
                {"type": "text", "text": "hi"},
                {
                    "type": "image",
                    "url": "https://x.test/a.jpg",
                    "mimeType": "image/jpeg",
                    "filename": "a.jpg",
                    "detail": "low",
                    "width": 640,
                    "height": 480,
                    "providerMetadata": estimate,
                },
                {
                    "type": "file",
                    "url": "https://x.test/r.pdf",
                    "mediaType": "application/pdf",
                    "filename": "r.pdf",
                },
                {"type": "reasoning", "text": "thinking"},
                {"type": "data-om-status", "data": {"pending": 3}},
            ],
        }
    )
    assert m.created_at == datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    assert m.parts == (
        TextPart(text="hi"),
        ImagePart(
            url="https://x.test/a.jpg",
            mime_type="image/jpeg",
            filename="a.jpg",
            detail="low",
            width=640,
            height=480,
            token_estimate=1234,
        ),
        FilePart(url="https://x.test/r.pdf", mime_type="application/pdf", filename="r.pdf"),
        ReasoningPart(text="thinking"),
        DataPart(type="data-om-status", data={"pending": 3}),
    )


def test_ui_file_with_bare_base64_data_is_stored_as_a_data_uri() -> None:
    payload = "SGVsbG8sIHdvcmxkIQ=="
    m = norm(
        {"id": "f", "role": "user", "parts": [{"type": "file", "data": payload, "mimeType": "text/plain"}]}
    )
    assert m.parts == (FilePart(url=f"data:text/plain;base64,{payload}", mime_type="text/plain"),)


def test_ui_tool_invocation_v4_nested_and_flat_shapes() -> None:
    nested = {
        "type": "tool-invocation",
        "toolInvocation": {
            "toolCallId": "c1",
            "toolName": "weather",
            "state": "result",
            "args": {"city": "Paris"},
            "result": {"temp": 21},
        },
    }
    flat = {"type": "tool-invocation", "toolCallId": "c2", "toolName": "search", "state": "call", "args": "x"}
    m = norm({"id": "a", "role": "assistant", "parts": [nested, flat]})
    assert m.parts == (
        ToolInvocationPart(
            tool_call_id="c1",
            tool_name="weather",
            state="result",
            args={"city": "Paris"},
            result={"temp": 21},
        ),
        ToolInvocationPart(tool_call_id="c2", tool_name="search", state="call", args="x"),
    )


@pytest.mark.parametrize(
    ("v5_state", "state"),
    [
        ("input-streaming", "partial-call"),
        ("input-available", "call"),
        ("output-available", "result"),
        ("output-error", "error"),
        ("output-denied", "output-denied"),
    ],
)
def test_ui_tool_part_v5_shape_maps_onto_tool_invocation(v5_state: str, state: str) -> None:
    part = {
        "type": "tool-weather",
        "toolCallId": "c1",
        "state": v5_state,
        "input": {"city": "Paris"},
        "output": {"temp": 21} if v5_state == "output-available" else None,
        "errorText": "boom" if v5_state == "output-error" else None,
        "approval": {"id": "ap1", "approved": False, "reason": "no"} if v5_state == "output-denied" else None,
    }
    (invocation,) = norm({"id": "a", "role": "assistant", "parts": [part]}).parts
    assert isinstance(invocation, ToolInvocationPart)
    assert (invocation.tool_name, invocation.state, invocation.args) == ("weather", state, {"city": "Paris"})
    assert invocation.result == part["output"]
    assert invocation.error == part["errorText"]
    assert invocation.approval == part["approval"]


def test_ui_dynamic_tool_takes_its_name_from_the_part() -> None:
    part = {"type": "dynamic-tool", "toolName": "mcp_lookup", "toolCallId": "c9", "state": "input-available"}
    (invocation,) = norm({"id": "a", "role": "assistant", "parts": [part]}).parts
    assert invocation == ToolInvocationPart(tool_call_id="c9", tool_name="mcp_lookup", state="call")


def test_ai_sdk_v4_attachments_become_image_and_file_parts_after_the_content() -> None:
    message = norm(
        {
            "id": "m",
            "role": "user",
            "content": "Here are the floor plan and the lease",
            "experimental_attachments": [
                {"url": "https://x.test/plan.png", "name": "plan.png", "contentType": "image/png"},
                {"url": "data:application/pdf;base64,JVBERi0xLjQK", "name": "lease.pdf"},
                # no type given: the name's or the url's extension says
                {"url": "https://x.test/photo.jpeg?size=large"},
            ],
        }
    )
    text, plan, lease, photo = message.parts
    assert text == TextPart(text="Here are the floor plan and the lease")
    assert isinstance(plan, ImagePart) and (plan.url, plan.mime_type, plan.filename) == (
        "https://x.test/plan.png",
        "image/png",
        "plan.png",
    )
    assert isinstance(lease, FilePart) and (lease.mime_type, lease.filename) == (
        "application/pdf",
        "lease.pdf",
    )
    assert isinstance(photo, ImagePart) and photo.mime_type == "image/jpeg"
    # counted as every other attachment: more than the text alone
    counter = TokenCounter(make_tokenizer("tokenx"), "openai/gpt-4o")
    assert counter.count_message(message) > counter.count_message(
        norm({"role": "user", "content": text.text})
    )


def test_mastra_stored_format_2_attachments_are_read_too() -> None:
    message = norm(
        {
            "role": "user",
            "content": {
                "format": 2,
                "parts": [{"type": "text", "text": "the receipt"}],
                "experimental_attachments": [{"url": "https://x.test/r.gif", "contentType": "image/gif"}],
            },
        }
    )
    assert [type(p) for p in message.parts] == [TextPart, ImagePart]


@pytest.mark.parametrize(
    ("attachments", "path"),
    [
        ("plan.png", "messages[0].experimental_attachments"),
        ([{"name": "plan.png"}], "messages[0].experimental_attachments[0].url"),
        (
            [{"url": "https://x.test/a", "contentType": 7}],
            "messages[0].experimental_attachments[0].contentType",
        ),
        ([7], "messages[0].experimental_attachments[0]"),
    ],
)
def test_bad_attachments_are_refused_naming_the_field(attachments: Any, path: str) -> None:
    error = rejected(
        {"role": "user", "content": "x", "experimental_attachments": attachments}, path_prefix="messages[0]"
    )
    assert error.path == path


def test_plain_string_content_without_parts() -> None:
    m = norm({"id": "m", "role": "assistant", "content": "Sure."})
    assert m.parts == (TextPart(text="Sure."),)


# --- optional client fields ---------------------------------------------------------------------------------


def test_missing_id_gets_a_uuid4_and_missing_created_at_is_now_at_millisecond_precision() -> None:
    m = norm({"role": "user", "content": "hi"})
    assert uuid.UUID(m.id).version == 4
    assert m.created_at == datetime(2025, 3, 4, 5, 6, 7, 891000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2025-01-02T03:04:05+02:00", datetime(2025, 1, 2, 1, 4, 5, tzinfo=UTC)),
        ("2025-01-02T03:04:05.123456Z", datetime(2025, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)),
        ("2025-01-02T03:04:05", datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)),
        (1735787045678, datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)),
    ],
)
def test_created_at_iso_or_epoch_ms_naive_as_utc(value: Any, expected: datetime) -> None:
    assert norm({"id": "m", "role": "user", "created_at": value, "content": "x"}).created_at == expected


def test_naive_now_is_taken_as_utc() -> None:
    m = norm({"id": "m", "role": "user", "content": "x"}, now=datetime(2025, 1, 1, 12, 0))
    assert m.created_at == datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("raw", "model"),
    [
        ({"model": "openai/gpt-5-mini"}, "openai/gpt-5-mini"),
        ({"metadata": {"model": "anthropic/claude-sonnet-4"}}, "anthropic/claude-sonnet-4"),
        ({"metadata": {"provider": "google", "modelId": "gemini-2.5-flash"}}, "google/gemini-2.5-flash"),
    ],
)
def test_assistant_model_sources(raw: dict[str, Any], model: str) -> None:
    assert norm({"id": "a", "role": "assistant", "content": "ok", **raw}).model == model


def test_assistant_model_from_the_last_step_start() -> None:
    parts = [
        {"type": "step-start", "model": "openai/gpt-4o"},
        {"type": "text", "text": "a"},
        {"type": "step-start", "model": {"provider": "openai", "modelId": "gpt-5"}},
        {"type": "text", "text": "b"},
    ]
    assert norm({"id": "a", "role": "assistant", "parts": parts}).model == "openai/gpt-5"


def test_model_is_only_kept_for_assistant_messages() -> None:
    assert norm({"id": "u", "role": "user", "content": "x", "model": "openai/gpt-5"}).model is None


def test_thread_id_from_the_request_or_the_message() -> None:
    assert norm({"id": "m", "role": "user", "content": "x"}, thread_id="t1").thread_id == "t1"
    assert norm({"id": "m", "role": "user", "content": "x", "threadId": "t2"}).thread_id == "t2"


# --- rejections ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "path", "reason"),
    [
        ({"id": "m", "role": "robot", "content": "x"}, "messages[0].role", "unknown role 'robot'"),
        ({"id": "m", "content": "x"}, "messages[0].role", "is required"),
        ({"id": "m", "role": "user"}, "messages[0].content", "message has no content"),
        ({"id": "m", "role": "user", "parts": []}, "messages[0].parts", "message has no content"),
        ({"id": "m", "role": "user", "parts": [{"type": "step-start"}]}, "messages[0].parts", "no content"),
        (
            {"id": "m", "role": "user", "parts": [{"type": "text", "text": " \n\t"}]},
            "messages[0].parts",
            "message content is only whitespace",
        ),
        (
            {
                "id": "m",
                "role": "user",
                "parts": [{"type": "text", "text": "a"}, {"type": "text", "text": 5}],
            },
            "messages[0].parts[1].text",
            "must be a string",
        ),
        (
            {"id": "m", "role": "user", "parts": [{"type": "text", "text": "a"}, {}, {"type": "video"}]},
            "messages[0].parts[1].type",
            "must be a string",
        ),
        (
            {"id": "m", "role": "user", "parts": [{"type": "text", "text": "a"}, {"type": "source-url"}]},
            "messages[0].parts[1].type",
            "unknown part type 'source-url'",
        ),
        (
            {"id": "m", "role": "user", "content": [{"type": "text", "text": "a"}, {"type": "input_audio"}]},
            "messages[0].content[1].type",
            "audio input (input_audio) is not supported",
        ),
        (
            {"id": "", "role": "user", "content": "x"},
            "messages[0].id",
            "must be 1 to 256 characters long (got 0)",
        ),
        ({"id": "x" * 257, "role": "user", "content": "x"}, "messages[0].id", "(got 257)"),
        (
            {"id": "a\nb", "role": "user", "content": "x"},
            "messages[0].id",
            "must not contain control characters",
        ),
        ({"id": 7, "role": "user", "content": "x"}, "messages[0].id", "must be a string"),
        (
            {"id": "m", "role": "user", "content": "x", "createdAt": "yesterday"},
            "messages[0].createdAt",
            "must be an ISO 8601 timestamp or epoch milliseconds",
        ),
        ({"id": "m", "role": "user", "content": "x", "createdAt": True}, "messages[0].createdAt", "ISO 8601"),
        ({"id": "m", "role": "user", "content": 3}, "messages[0].content", "must be a string, an array"),
        (
            {"id": "m", "role": "user", "content": "x", "tool_calls": []},
            "messages[0].tool_calls",
            "only assistant messages may carry tool calls",
        ),
        ({"id": "t", "role": "tool", "content": "42"}, "messages[0].tool_call_id", "is required"),
        (
            {
                "id": "m",
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "u", "detail": "max"}}],
            },
            "messages[0].content[0].image_url.detail",
            "must be one of low, high, auto",
        ),
        (
            {
                "id": "a",
                "role": "assistant",
                "parts": [{"type": "tool-x", "toolCallId": "c", "state": "done"}],
            },
            "messages[0].parts[0].state",
            "unknown tool state 'done'",
        ),
        (
            {
                "id": "m",
                "role": "user",
                "parts": [
                    {
                        "type": "image",
                        "url": "https://x.test/a.png",
                        "providerMetadata": {"mastra": {"tokenEstimate": {"source": "client", "tokens": -1}}},
                    }
                ],
            },
            "messages[0].parts[0].providerMetadata.mastra.tokenEstimate.tokens",
            "must be from 0 to 1,000,000,000",
        ),
        (
            {"id": "m", "role": "user", "parts": [{"type": "image", "url": "u", "width": 0}]},
            "messages[0].parts[0].width",
            "must be a positive integer",
        ),
        (
            {"id": "m", "role": "user", "content": "x", "threadId": "other"},
            "messages[0].threadId",
            "names thread 'other' but is sent to 't1'",
        ),
        ({"id": "m", "role": "user", "content": "\ud800"}, "messages[0]", "unpaired UTF-16 surrogates"),
    ],
)
def test_rejections_name_the_path_and_the_reason(raw: dict[str, Any], path: str, reason: str) -> None:
    error = rejected(raw, path_prefix="messages[0]", thread_id="t1")
    assert isinstance(error, ValueError)
    assert error.path == path
    assert reason in error.reason
    assert str(error) == f"{path}: {error.reason}"


def test_rejects_a_message_over_the_size_limit_naming_size_and_limit() -> None:
    raw = {"id": "m", "role": "user", "content": "x" * 500}
    size = len(json.dumps(message_to_json(norm(raw)), separators=(",", ":")).encode())
    error = rejected(raw, max_bytes=size - 1)
    assert error.path == "message"
    assert error.reason == f"message is {size} bytes as JSON, over the limit of {size - 1} bytes"
    assert norm(raw, max_bytes=size).parts == (TextPart(text="x" * 500),)


def test_default_path_prefix_is_message() -> None:
    assert rejected({"id": "m", "role": "user", "parts": [{"type": "nope"}]}).path == "message.parts[0].type"


# --- stored form --------------------------------------------------------------------------------------------


def full_message() -> Message:
    return norm(
        {
            "id": "a1",
            "role": "assistant",
            "createdAt": "2025-01-02T03:04:05.678+01:00",
            "model": "openai/gpt-5",
            "metadata": {"source": "test", "nested": {"k": [1, 2]}},
            "parts": [
                {"type": "text", "text": "héllo", "createdAt": 1735787045000},
                {
                    "type": "image",
                    "url": "data:image/png;base64,iVBORw0KGgo=",
                    "detail": "auto",
                    "width": 10,
                    "height": 20,
                    "sizeBytes": 8,
                    "mediaResolution": "low",
                    "providerMetadata": {"mastra": {"tokenEstimate": {"source": "client", "tokens": 12}}},
                },
                {
                    "type": "file",
                    "url": "https://x.test/a.pdf",
                    "mediaType": "application/pdf",
                    "filename": "a.pdf",
                },
                {
                    "type": "tool-search",
                    "toolCallId": "c1",
                    "state": "output-available",
                    "input": {"q": "x"},
                    "output": [{"title": "t"}],
                },
                {
                    "type": "tool-approve",
                    "toolCallId": "c2",
                    "state": "approval-responded",
                    "approval": {"id": "p"},
                },
                {"type": "reasoning", "text": "hmm"},
                {"type": "data-om-activation", "data": {"chunks": 2}},
            ],
        },
        thread_id="th",
    )


def test_stored_form_round_trips_with_camel_case_keys_and_millisecond_utc_timestamps() -> None:
    m = full_message()
    stored = message_to_json(m)
    assert stored["createdAt"] == "2025-01-02T02:04:05.678Z"
    assert stored["threadId"] == "th"
    assert stored["parts"][0] == {"type": "text", "text": "héllo", "createdAt": "2025-01-02T03:04:05.000Z"}
    assert stored["parts"][1]["mimeType"] == "image/png"
    assert (stored["parts"][1]["tokenEstimate"], stored["parts"][1]["mediaResolution"]) == (12, "low")
    assert stored["parts"][3]["toolCallId"] == "c1"
    assert message_from_json(json.loads(json.dumps(stored))) == m


def test_stored_form_omits_absent_fields() -> None:
    stored = message_to_json(norm({"id": "m", "role": "user", "content": "x"}))
    assert stored == {
        "id": "m",
        "role": "user",
        "createdAt": "2025-03-04T05:06:07.891Z",
        "parts": [{"type": "text", "text": "x"}],
    }


def hash_of(message: Message) -> str:
    return content_hash(message_to_json(message))


def test_the_stored_form_beside_a_normalised_message_is_its_stored_form() -> None:
    raw = {"id": "m", "role": "assistant", "content": "ok", "model": "openai/gpt-5", "metadata": {"k": 1}}
    message, stored = normalize_message(raw, now=NOW, max_bytes=10_000)
    assert message == norm(raw)
    assert stored == message_to_json(message)


def test_content_hash_is_equal_for_the_same_content() -> None:
    raw = {"id": "m", "role": "user", "content": "hello", "createdAt": "2025-01-01T00:00:00Z"}
    first = norm(raw)
    assert hash_of(first) == hash_of(norm(raw, now=NOW + timedelta(hours=1)))
    # id, thread and metadata are not content
    assert hash_of(first) == hash_of(norm({**raw, "id": "other", "metadata": {"x": 1}}, thread_id="t"))
    assert hash_of(full_message()) == hash_of(message_from_json(message_to_json(full_message())))


@pytest.mark.parametrize(
    "change",
    [
        {"content": "hello!"},
        {"createdAt": "2025-01-01T00:00:00.001Z"},
        {"role": "system"},
    ],
)
def test_content_hash_differs_for_different_content(change: dict[str, Any]) -> None:
    raw = {"id": "m", "role": "user", "content": "hello", "createdAt": "2025-01-01T00:00:00Z"}
    assert hash_of(norm(raw)) != hash_of(norm({**raw, **change}))


def test_content_hash_covers_the_model() -> None:
    raw = {"id": "a", "role": "assistant", "content": "ok", "createdAt": "2025-01-01T00:00:00Z"}
    assert hash_of(norm({**raw, "model": "openai/gpt-5"})) != hash_of(norm({**raw, "model": "x/y"}))


def test_a_redelivery_without_created_at_matches_when_normalised_at_the_stored_time() -> None:
    raw = {"id": "m", "role": "user", "content": "hi"}
    stored = norm(raw)
    redelivered = norm(raw, now=datetime(2030, 1, 1, tzinfo=timezone(timedelta(hours=3))))
    assert hash_of(redelivered) != hash_of(stored)
    assert hash_of(norm(raw, now=stored.created_at)) == hash_of(stored)


# --- search text --------------------------------------------------------------------------------------------


def test_message_text_holds_text_tool_names_and_results() -> None:
    text = message_text(full_message())
    assert text.split("\n") == ["héllo", "search", '[{"title": "t"}]', "approve"]


def test_message_text_is_truncated_to_100k_characters() -> None:
    m = norm({"id": "m", "role": "user", "content": "y" * 150_000}, max_bytes=10**6)
    assert message_text(m) == "y" * 100_000
