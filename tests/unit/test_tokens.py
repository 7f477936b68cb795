from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from om_core.domain.config import ConfigError, parse_memory_config
from om_core.domain.message_input import normalize_message
from om_core.domain.messages import Message
from om_core.domain.tokens import (
    TiktokenTokenizer,
    TokenCounter,
    TokenizerUnavailableError,
    TokenxEstimator,
    bundled_tiktoken_dir,
    make_tokenizer,
)

NOW = datetime(2025, 1, 1, tzinfo=UTC)
TOKENX = TokenxEstimator()
# a message holding only an attachment counts round(tokens("user") + attachment + 3.8) = attachment + 5
USER_OVERHEAD = 5


def msg(raw_parts: list[dict[str, Any]] | str, role: str = "user") -> Message:
    body: dict[str, Any] = {"content": raw_parts} if isinstance(raw_parts, str) else {"parts": raw_parts}
    return normalize_message({"id": "m", "role": role, **body}, now=NOW, max_bytes=10**8)[0]


def attachment_tokens(part: dict[str, Any], provider_model: str | None = None) -> int:
    return TokenCounter(TOKENX, provider_model).count_message(msg([part])) - USER_OVERHEAD


def png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


def data_uri(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


# --- tokenx -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("user", 1),
        ("assistant", 2),
        ("Hello world", 2),
        ("hello " * 300, 300),
        ("Message 0: " + "x" * 189, 36),
        ("", 0),
        ("   \n\t ", 0),
        ("你好世界", 4),  # CJK: one per character
        ("1234567890", 1),  # numbers: one
        ("abc", 1),  # up to 3 characters: one
        ("!!!!!", 3),  # punctuation runs: half their length, rounded up
        ("Größenordnung", 5),  # German accents: 3 characters per token
        ("établissement", 5),  # French accents: 3 characters per token
        ("przyjaźń", 3),  # Polish: 3.5 characters per token
        ("internationalization", 4),  # otherwise 6 characters per token
        ('"quoted"', 2),  # quotes are not punctuation to tokenx 1.3.0
    ],
)
def test_tokenx_heuristic(text: str, tokens: int) -> None:
    assert TOKENX.count(text) == tokens
    assert TOKENX.name == "tokenx"


def test_tokenx_splits_whitespace_and_punctuation_runs_from_words() -> None:
    # "foo" 1, "." 1, "bar_baz" -> "bar" 1 "_" 1 "baz" 1, "..." 1, "qux" 1
    assert TOKENX.count("foo. bar_baz...qux") == 7


# --- message and conversation totals (docs/semantics.md, Counting tokens) -----------------------------------


def test_hello_world_counts_7_and_31_in_a_conversation() -> None:
    counter = TokenCounter(TOKENX)
    m = msg("Hello world")
    assert counter.count_message(m) == 7
    assert counter.count_messages([m]) == 31
    assert counter.count_messages([m, m]) == 24 + 7 + 7
    assert counter.count_messages([]) == 0


def test_data_parts_and_reasoning_count_zero() -> None:
    counter = TokenCounter(TOKENX)
    plain = msg([{"type": "text", "text": "Hello world"}])
    with_data = msg(
        [{"type": "text", "text": "Hello world"}, {"type": "data-om-activation", "data": "z" * 10_000}]
    )
    with_reasoning = msg(
        [{"type": "text", "text": "Hello world"}, {"type": "reasoning", "text": "r " * 5_000}]
    )
    assert counter.count_message(with_data) == counter.count_message(plain) == 7
    assert counter.count_message(with_reasoning) == 7


def test_count_text() -> None:
    assert TokenCounter(TOKENX).count_text("Hello world") == 2
    assert TokenCounter(TOKENX).count_text("") == 0


# --- images -------------------------------------------------------------------------------------------------


def test_openai_image_with_dimensions_2048x1024_is_1105() -> None:
    assert (
        attachment_tokens({"type": "image", "url": "https://x.test/a.png", "width": 2048, "height": 1024})
        == 1105
    )


def test_url_image_without_dimensions_is_85() -> None:
    assert attachment_tokens({"type": "image", "url": "https://x.test/a.png"}) == 85


def test_two_million_character_base64_data_uri_is_765() -> None:
    assert attachment_tokens({"type": "image", "url": "data:image/png;base64," + "A" * 2_000_000}) == 765


def test_inline_image_dimensions_are_read_from_the_image_header() -> None:
    assert attachment_tokens({"type": "image", "url": data_uri("image/png", png(1, 1))}) == 85
    # 2000x2000 -> 768x768 -> 4 tiles, although the payload is tiny
    assert attachment_tokens({"type": "image", "url": data_uri("image/png", png(2000, 2000))}) == 765


@pytest.mark.parametrize(
    ("part", "tokens"),
    [
        ({"detail": "low", "width": 4000, "height": 4000}, 85),
        ({"detail": "high"}, 85 + 4 * 170),  # no dimensions, no bytes: fallback tiles
        ({"detail": "high", "width": 500, "height": 500}, 85 + 170),
        ({"width": 768, "height": 768}, 85),  # auto: not larger than 768 -> low
    ],
)
def test_openai_detail_levels(part: dict[str, Any], tokens: int) -> None:
    assert attachment_tokens({"type": "image", "url": "https://x.test/a.png", **part}) == tokens


@pytest.mark.parametrize(
    ("provider_model", "tokens"),
    [
        ("openai/gpt-5-mini", 70 + 6 * 140),
        ("openai/gpt-4o-mini", 2833 + 6 * 5667),
        ("openai/o3", 75 + 6 * 150),
        ("openai/computer-use-preview", 65 + 6 * 129),
        ("groq/llama-4", 85 + 6 * 170),  # unknown providers price like OpenAI's defaults
        ("google/gemini-2.5-flash", 3 * 2 * 258),
        ("google/gemini-3-pro", 1120),
        ("anthropic/claude-sonnet-4", 1640),  # 1568x784 / 750, rounded up
    ],
)
def test_provider_image_heuristics(provider_model: str, tokens: int) -> None:
    part = {"type": "image", "url": "https://x.test/a.png", "width": 2048, "height": 1024}
    assert attachment_tokens(part, provider_model) == tokens


def test_provider_image_heuristics_without_dimensions() -> None:
    url_only = {"type": "image", "url": "https://x.test/a.png"}
    big_inline = {"type": "image", "url": "data:image/png;base64," + "A" * 2_000_000}
    assert attachment_tokens(url_only, "google/gemini-2.5-flash") == 258
    assert attachment_tokens(url_only, "anthropic/claude-sonnet-4") == 1600
    assert attachment_tokens(big_inline, "anthropic/claude-sonnet-4") == 1366
    assert attachment_tokens({**url_only, "mediaResolution": "low"}, "google/gemini-3-flash") == 280


def test_client_token_estimate_is_taken_as_is() -> None:
    estimate = {"mastra": {"tokenEstimate": {"v": 0, "source": "client", "key": "client", "tokens": 4321}}}
    image = {"type": "image", "url": "https://x.test/a.png", "width": 2048, "height": 1024}
    file = {
        "type": "file",
        "url": "data:application/pdf;base64," + "A" * 40_000,
        "mediaType": "application/pdf",
    }
    assert attachment_tokens({**image, "providerMetadata": estimate}) == 4321
    assert attachment_tokens({**file, "providerMetadata": estimate}) == 4321


# --- files --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider_model", "mime", "tokens"),
    [
        (None, "application/pdf", 7500),  # 30,000 bytes / 4
        ("google/gemini-2.5-flash", "application/pdf", 1500),  # / 20
        ("anthropic/claude-sonnet-4", "application/pdf", 10000),  # / 3
        (None, "text/plain", 7500),
    ],
)
def test_non_image_files_with_bytes(provider_model: str | None, mime: str, tokens: int) -> None:
    part = {"type": "file", "url": "data:x;base64," + "A" * 40_000, "mediaType": mime}
    assert attachment_tokens(part, provider_model) == tokens


def test_small_pdf_floors() -> None:
    part = {"type": "file", "url": "data:application/pdf;base64,JVBERi0xLjQK", "mediaType": "application/pdf"}
    assert attachment_tokens(part) == 500
    assert attachment_tokens(part, "google/gemini-2.5-flash") == 258
    assert attachment_tokens(part, "anthropic/claude-sonnet-4") == 1500


def test_url_only_file_counts_its_descriptor() -> None:
    part = {"type": "file", "url": "https://x.test/docs/report%201.pdf", "mediaType": "application/pdf"}
    descriptor = json.dumps(
        {"type": "file", "mimeType": "application/pdf", "filename": "report 1.pdf"}, separators=(",", ":")
    )
    assert attachment_tokens(part) == TOKENX.count(descriptor)


def test_image_like_file_is_counted_as_an_image() -> None:
    assert attachment_tokens({"type": "file", "url": "https://x.test/a.bin", "mediaType": "image/png"}) == 85
    assert attachment_tokens({"type": "file", "url": "https://x.test/photo.JPG", "mediaType": "x/y"}) == 85
    inline = {"type": "file", "url": "data:image/png;base64," + "A" * 2_000_000, "mediaType": "image/png"}
    assert attachment_tokens(inline) == 765


# --- tool invocations ---------------------------------------------------------------------------------------


def tool_message(**invocation: Any) -> Message:
    fields = {"toolCallId": "c1", "toolName": "weather", **invocation}
    return msg([{"type": "tool-invocation", **fields}], role="assistant")


def expected(*texts: str, overhead: float) -> int:
    return round(sum(TOKENX.count(t) for t in ("assistant", *texts)) + overhead)


def test_tool_call_with_object_args_counts_name_and_json_args_minus_12() -> None:
    m = tool_message(state="call", args={"city": "Paris"})
    assert TokenCounter(TOKENX).count_message(m) == expected("weather", '{"city":"Paris"}', overhead=3.8 - 12)


def test_tool_call_with_string_args_has_no_discount() -> None:
    m = tool_message(state="call", args="Paris, France")
    assert TokenCounter(TOKENX).count_message(m) == expected("weather", "Paris, France", overhead=3.8)


def test_tool_result_adds_pretty_json_result_an_extra_message_and_another_discount() -> None:
    m = tool_message(state="result", args={"city": "Paris"}, result={"temp": 21, "sky": "clear"})
    pretty = json.dumps({"temp": 21, "sky": "clear"}, indent=2)
    assert TokenCounter(TOKENX).count_message(m) == expected(
        "weather", '{"city":"Paris"}', pretty, overhead=3.8 - 12 - 12 + 3.8
    )


def test_tool_result_string_is_counted_as_is() -> None:
    m = tool_message(state="result", args="Paris", result="sunny and warm today")
    assert TokenCounter(TOKENX).count_message(m) == expected(
        "weather", "Paris", "sunny and warm today", overhead=7.6
    )


def test_empty_tool_result_counts_the_placeholder() -> None:
    m = tool_message(state="result", args="Paris")
    assert TokenCounter(TOKENX).count_message(m) == expected(
        "weather", "Paris", "[empty result]", overhead=7.6
    )


def test_tool_error_and_denial_are_extra_messages_with_their_text() -> None:
    error = msg(
        [{"type": "tool-weather", "toolCallId": "c", "state": "output-error", "errorText": "timeout"}],
        "assistant",
    )
    denied = msg([{"type": "tool-weather", "toolCallId": "c", "state": "output-denied"}], "assistant")
    assert TokenCounter(TOKENX).count_message(error) == expected("weather", "timeout", overhead=7.6)
    assert TokenCounter(TOKENX).count_message(denied) == expected(
        "weather", "Tool call was not approved by the user", overhead=7.6
    )


def test_openai_tool_message_counts_its_result_as_an_extra_message() -> None:
    m = normalize_message(
        {"id": "t", "role": "tool", "tool_call_id": "c1", "content": "21 degrees"}, now=NOW, max_bytes=10**6
    )[0]
    assert TokenCounter(TOKENX).count_message(m) == round(1 + TOKENX.count("21 degrees") + 3.8 + 3.8)


def test_encrypted_content_in_tool_results_is_replaced_by_a_stand_in() -> None:
    secret = "k" * 10_000
    m = tool_message(state="result", args="x", result={"encryptedContent": secret})
    stand_in = json.dumps({"encryptedContent": "[stripped encryptedContent: 10000 characters]"}, indent=2)
    assert TokenCounter(TOKENX).count_message(m) == expected("weather", "x", stand_in, overhead=7.6 - 12)


def test_multimodal_tool_result_prices_attachments_like_parts() -> None:
    result = {
        "type": "content",
        "value": [
            {"type": "text", "text": "screenshot taken"},
            {"type": "media", "data": "A" * 2_000_000, "mediaType": "image/png"},
        ],
    }
    m = tool_message(state="result", args="x", result=result)
    assert TokenCounter(TOKENX).count_message(m) == round(
        TOKENX.count("assistant")
        + TOKENX.count("weather")
        + 1
        + TOKENX.count("screenshot taken")
        + 765
        + 7.6
        - 12
    )


# --- tokenizers ---------------------------------------------------------------------------------------------


def test_make_tokenizer_specs() -> None:
    assert make_tokenizer("tokenx").name == "tokenx"
    assert make_tokenizer("tiktoken").name == "tiktoken:o200k_base"
    assert make_tokenizer("tiktoken:cl100k_base").name == "tiktoken:cl100k_base"
    with pytest.raises(ValueError, match="unknown tokenizer 'sentencepiece'"):
        make_tokenizer("sentencepiece")


def test_tiktoken_o200k_counts_hello_world_as_2_and_special_tokens_as_text() -> None:
    tokenizer = TiktokenTokenizer()
    assert tokenizer.count("Hello world") == 2
    assert tokenizer.count("<|endoftext|>") > 1
    assert TokenCounter(tokenizer).count_message(msg("Hello world")) == 7
    assert TokenCounter(tokenizer).count_messages([msg("Hello world")]) == 31


def test_tiktoken_loads_offline_from_the_litellm_wheel_without_importing_litellm() -> None:
    script = """
import os, socket, sys
def refuse(*args, **kwargs):
    raise OSError("network disabled in this test")
socket.socket.connect = refuse
socket.create_connection = refuse
from om_core.domain.tokens import TiktokenTokenizer
print(TiktokenTokenizer("o200k_base").count("Hello world"))
print(os.environ["TIKTOKEN_CACHE_DIR"])
print("litellm" in sys.modules)
"""
    env = {k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    bundled = bundled_tiktoken_dir()
    assert bundled is not None
    assert bundled.parts[-3:] == ("litellm", "litellm_core_utils", "tokenizers")
    assert out == ["2", str(bundled), "False"]


def test_a_config_may_name_exactly_the_encodings_the_tokenizer_knows() -> None:
    known = ("o200k_base", "o200k_harmony", "cl100k_base", "p50k_base", "p50k_edit", "r50k_base")
    for encoding in known:
        assert parse_memory_config({"tokenizer": f"tiktoken:{encoding}"}).tokenizer == f"tiktoken:{encoding}"
    # tiktoken has gpt2, but not as one encoding file: a config naming it could never count a message
    with pytest.raises(ConfigError, match="tokenizer"):
        parse_memory_config({"tokenizer": "tiktoken:gpt2"})


def test_tiktoken_fails_clearly_when_an_encoding_is_not_available_offline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    with pytest.raises(TokenizerUnavailableError, match="'r50k_base' is not available offline"):
        TiktokenTokenizer("r50k_base")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    with pytest.raises(TokenizerUnavailableError, match="TIKTOKEN_CACHE_DIR is empty"):
        TiktokenTokenizer("p50k_edit")
    with pytest.raises(TokenizerUnavailableError, match="unknown tiktoken encoding 'gpt2'"):
        TiktokenTokenizer("gpt2")
