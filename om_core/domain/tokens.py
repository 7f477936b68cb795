"""Token counting: the tokenizers and the per-message / per-conversation totals (docs/semantics.md,
Counting tokens).

A message is counted once, when it is appended, and the count travels in its event, so everything here is a
pure function of the message: no provider token-count endpoints and no remote image probing (the reference
does both in its async variant; its synchronous heuristics are what this module reproduces).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import importlib.util
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import tiktoken

from om_core.domain.messages import FilePart, ImagePart, Message, TextPart, ToolInvocationPart

TOKENS_PER_MESSAGE = 3.8
TOKENS_PER_CONVERSATION = 24
# JSON-serialised args/results overstate what the provider's native encoding costs; the reference corrects
OBJECT_PAYLOAD_DISCOUNT = 12
EMPTY_TOOL_RESULT = "[empty result]"
DEFAULT_TOOL_ERROR = "Tool execution failed"
DEFAULT_DENIAL_REASON = "Tool call was not approved by the user"


class Tokenizer(Protocol):
    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...


# --- tokenx 1.3.0 -------------------------------------------------------------------------------------------
# The reference runs in JavaScript, so the character classes are spelled out where Python's differ:
# JS ``\s`` (no \x1c-\x1f or \x85, but \ufeff), ASCII-only ``\d``, and lengths in UTF-16 code units.

_JS_WHITESPACE = "[\t\n\x0b\x0c\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
_PUNCTUATION = "[" + re.escape(".,!?;(){}[]<>:/\\|@#$%^&*+=`~_-") + "]"
_SEGMENT_SPLIT = re.compile(f"({_JS_WHITESPACE}+|{_PUNCTUATION}+)")
_WHITESPACE_RUN = re.compile(f"{_JS_WHITESPACE}+")
_HAS_PUNCTUATION = re.compile(_PUNCTUATION)
_NUMERIC = re.compile(r"[0-9]+(?:[.,][0-9]+)*")
_CJK = re.compile(
    "[\u4e00-\u9fff\u3400-\u4dbf\u3000-\u303f\uff00-\uffef\u30a0-\u30ff\u2e80-\u2eff\u31c0-\u31ef"
    "\u3200-\u32ff\u3300-\u33ff\uac00-\ud7af\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\ud7b0-\ud7ff]"
)


def _js_ignore_case_class(chars: str) -> re.Pattern[str]:
    """A class matching what JS's non-unicode ``/[chars]/i`` matches: case variants under ``toUpperCase``,
    except mappings to several characters or from non-ASCII to ASCII (so ``ß`` does not match ``SS``)."""

    def canonical(ch: str) -> str:
        upper = ch.upper()
        if len(upper) != 1 or (ord(ch) >= 128 and ord(upper) < 128):
            return ch
        return upper

    members: set[str] = set()
    for ch in chars:
        for variant in (ch, ch.upper(), ch.lower()):
            if len(variant) == 1 and canonical(variant) == canonical(ch):
                members.add(variant)
    return re.compile("[" + re.escape("".join(sorted(members))) + "]")


_LANGUAGE_CHARS_PER_TOKEN: tuple[tuple[re.Pattern[str], float], ...] = (
    (_js_ignore_case_class("äöüßẞ"), 3.0),  # German
    (_js_ignore_case_class("éèêëàâîïôûùüÿçœæáíóúñ"), 3.0),  # French, Spanish, Portuguese
    (_js_ignore_case_class("ąćęłńóśźżěščřžýůúďťň"), 3.5),  # Polish, Czech
)
_DEFAULT_CHARS_PER_TOKEN = 6.0


def _utf16_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-16-le")) // 2


def _segment_tokens(segment: str) -> int:
    if _WHITESPACE_RUN.fullmatch(segment):
        return 0
    if _CJK.search(segment):
        return len(segment)
    if _NUMERIC.fullmatch(segment):
        return 1
    length = _utf16_length(segment)
    if length <= 3:
        return 1
    # segments are split on punctuation runs, so any punctuation here means the whole segment is a run
    if _HAS_PUNCTUATION.search(segment):
        return math.ceil(length / 2)
    for pattern, chars_per_token in _LANGUAGE_CHARS_PER_TOKEN:
        if pattern.search(segment):
            return math.ceil(length / chars_per_token)
    return math.ceil(length / _DEFAULT_CHARS_PER_TOKEN)


class TokenxEstimator:
    """tokenx 1.3.0 ``estimateTokenCount``: Mastra's meaning of "tokens" everywhere."""

    @property
    def name(self) -> str:
        return "tokenx"

    def count(self, text: str) -> int:
        if not text:
            return 0
        return sum(_segment_tokens(segment) for segment in _SEGMENT_SPLIT.split(text) if segment)


# --- tiktoken, offline --------------------------------------------------------------------------------------

# tiktoken names a cached encoding file after the sha1 of its download URL; knowing the URL lets a missing
# file fail here, clearly, instead of tiktoken silently trying to download it.
_TIKTOKEN_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
_TIKTOKEN_FILES = {
    "o200k_base": "o200k_base",
    "o200k_harmony": "o200k_base",
    "cl100k_base": "cl100k_base",
    "p50k_base": "p50k_base",
    "p50k_edit": "p50k_base",
    "r50k_base": "r50k_base",
}
# what a config may name: naming another encoding fails when the config is loaded, not at the first message
TIKTOKEN_ENCODINGS = frozenset(_TIKTOKEN_FILES)


class TokenizerUnavailableError(RuntimeError):
    """A tokenizer cannot be loaded without network access."""


def bundled_tiktoken_dir() -> Path | None:
    """The encodings shipped in the litellm wheel, located without importing litellm (which is slow and may
    reach for the network): ``find_spec`` of a top-level package only resolves where it lives."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "litellm_core_utils" / "tokenizers"
        if candidate.is_dir():
            return candidate
    return None


def ensure_tiktoken_cache_dir() -> Path:
    """Point ``TIKTOKEN_CACHE_DIR`` at the bundled encodings unless the operator chose a directory."""
    configured = os.environ.get("TIKTOKEN_CACHE_DIR")
    if configured == "":
        raise TokenizerUnavailableError(
            "TIKTOKEN_CACHE_DIR is empty, which makes tiktoken download every encoding; unset it or point it "
            "at a directory holding the encoding files"
        )
    if configured is not None:
        return Path(configured)
    bundled = bundled_tiktoken_dir()
    if bundled is None:
        raise TokenizerUnavailableError(
            "no tiktoken encodings available offline: TIKTOKEN_CACHE_DIR is not set and the litellm package "
            "(which ships them in litellm/litellm_core_utils/tokenizers/) is not installed"
        )
    os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled)
    return bundled


@functools.cache
def _load_encoding(encoding: str) -> tiktoken.Encoding:
    file_stem = _TIKTOKEN_FILES.get(encoding)
    if file_stem is None:
        raise TokenizerUnavailableError(
            f"unknown tiktoken encoding {encoding!r}; expected one of {', '.join(sorted(_TIKTOKEN_FILES))}"
        )
    cache_dir = ensure_tiktoken_cache_dir()
    cache_file = cache_dir / hashlib.sha1(_TIKTOKEN_URL.format(file_stem).encode()).hexdigest()
    if not cache_file.is_file():
        raise TokenizerUnavailableError(
            f"tiktoken encoding {encoding!r} is not available offline: {cache_file} ({file_stem}.tiktoken "
            f"under tiktoken's cache name) is missing from TIKTOKEN_CACHE_DIR={cache_dir}"
        )
    return tiktoken.get_encoding(encoding)


class TiktokenTokenizer:
    """An exact BPE tokenizer, loaded from local files only; the encoding is shared per process."""

    def __init__(self, encoding: str = "o200k_base") -> None:
        self._encoding = _load_encoding(encoding)
        self._name = f"tiktoken:{encoding}"

    @property
    def name(self) -> str:
        return self._name

    def count(self, text: str) -> int:
        if not text:
            return 0
        # user text may contain "<|endoftext|>" and the like: count it as text, never as a special token
        return len(self._encoding.encode_ordinary(text))


def make_tokenizer(spec: str) -> Tokenizer:
    """``tokenx``, ``tiktoken`` (o200k_base) or ``tiktoken:<encoding>``."""
    if spec == "tokenx":
        return TokenxEstimator()
    kind, _, encoding = spec.partition(":")
    if kind == "tiktoken":
        return TiktokenTokenizer(encoding or "o200k_base")
    raise ValueError(f"unknown tokenizer {spec!r}; expected 'tokenx', 'tiktoken' or 'tiktoken:<encoding>'")


# --- attachments --------------------------------------------------------------------------------------------

CLIENT_ESTIMATE_SOURCE = "client"
# What one message may count: far past any model's context window, and inside the 32-bit column the
# message projection stores its count in.
MAX_MESSAGE_TOKENS = 1_000_000_000


def client_token_estimate(provider_metadata: Any) -> int | None:
    """The client-supplied ``providerMetadata.mastra.tokenEstimate`` (single entry or a map of entries).

    Entries from other sources (the reference's own estimate cache) are ignored; a client entry whose
    ``tokens`` is not a finite number from 0 to ``MAX_MESSAGE_TOKENS`` raises ``ValueError``. Fractions round
    up: thresholds should trip early rather than late.
    """
    if not isinstance(provider_metadata, Mapping):
        return None
    mastra = provider_metadata.get("mastra")
    cache = mastra.get("tokenEstimate") if isinstance(mastra, Mapping) else None
    if not isinstance(cache, Mapping):
        return None
    entries = [cache] if "source" in cache else [v for v in cache.values() if isinstance(v, Mapping)]
    for entry in entries:
        if entry.get("source") != CLIENT_ESTIMATE_SOURCE:
            continue
        tokens = entry.get("tokens")
        if isinstance(tokens, bool) or not isinstance(tokens, int | float) or not math.isfinite(tokens):
            raise ValueError("client tokenEstimate.tokens must be a finite number")
        if not 0 <= tokens <= MAX_MESSAGE_TOKENS:
            raise ValueError(f"client tokenEstimate.tokens must be from 0 to {MAX_MESSAGE_TOKENS:,}")
        return math.ceil(tokens)
    return None


_IMAGE_EXTENSIONS = frozenset(
    {"png", "jpg", "jpeg", "webp", "gif", "bmp", "tiff", "tif", "heic", "heif", "avif"}
)
_EXTENSION = re.compile(r"\.([a-z0-9]+)$", re.IGNORECASE)
_BASE64_HEADER = re.compile(r";base64", re.IGNORECASE)
_ANY_JS_WHITESPACE = re.compile(f"{_JS_WHITESPACE}+")


def _is_http(value: str) -> bool:
    return value[:8].lower().startswith(("http://", "https://"))


def _extension(value: str) -> str | None:
    match = _EXTENSION.search(value.split("#", 1)[0].split("?", 1)[0])
    return match.group(1).lower() if match else None


def _url_filename(url: str) -> str | None:
    if not _is_http(url):
        return None
    segments = [s for s in urlsplit(url).path.split("/") if s]
    return unquote(segments[-1]) if segments else None


def _is_image_like_file(mime_type: str | None, url: str, filename: str | None) -> bool:
    if mime_type and mime_type.lower().startswith("image/"):
        return True
    if url.startswith("data:image/"):
        return True
    if _is_http(url) and _extension(urlsplit(url).path) in _IMAGE_EXTENSIONS:
        return True
    return filename is not None and _extension(filename) in _IMAGE_EXTENSIONS


def _base64_size(encoded: str) -> int:
    sanitized = _ANY_JS_WHITESPACE.sub("", encoded)
    padding = 2 if sanitized.endswith("==") else 1 if sanitized.endswith("=") else 0
    return max(0, (len(sanitized) * 3) // 4 - padding)


@dataclass(frozen=True, slots=True)
class _Asset:
    size_bytes: int | None
    base64_payload: str | None


def _asset(value: str, *, bare_is_base64: bool) -> _Asset:
    """Byte size and base64 payload of an attachment reference. Stored parts hold URLs, data URIs or opaque
    references; tool outputs hold bare base64 (``bare_is_base64``)."""
    if _is_http(value):
        return _Asset(None, None)
    if value.startswith("data:"):
        comma = value.find(",")
        encoded = value[comma + 1 :] if comma != -1 else ""
        is_base64 = comma != -1 and _BASE64_HEADER.search(value[:comma]) is not None
        return _Asset(_base64_size(encoded), encoded if is_base64 else None)
    if bare_is_base64:
        return _Asset(_base64_size(value), value)
    return _Asset(None, None)


def _b64decode(encoded: str) -> bytes | None:
    compact = _ANY_JS_WHITESPACE.sub("", encoded)
    try:
        return base64.b64decode(compact + "=" * (-len(compact) % 4))
    except (binascii.Error, ValueError):
        return None


_JPEG_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:
            i += 1
        elif marker in _JPEG_SOF:
            return int.from_bytes(data[i + 7 : i + 9], "big"), int.from_bytes(data[i + 5 : i + 7], "big")
        elif 0xD0 <= marker <= 0xD9 or marker == 0x01:
            i += 2
        else:
            length = int.from_bytes(data[i + 2 : i + 4], "big")
            if length < 2:
                return None
            i += 2 + length
    return None


def _header_size(head: bytes) -> tuple[int, int] | None:
    if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR":
        return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return int.from_bytes(head[6:8], "little"), int.from_bytes(head[8:10], "little")
    if head.startswith(b"BM") and len(head) >= 26:
        width = int.from_bytes(head[18:22], "little", signed=True)
        return abs(width), abs(int.from_bytes(head[22:26], "little", signed=True))
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP" and len(head) >= 30:
        chunk = head[12:16]
        if chunk == b"VP8X":
            return 1 + int.from_bytes(head[24:27], "little"), 1 + int.from_bytes(head[27:30], "little")
        if chunk == b"VP8 ":
            width = int.from_bytes(head[26:28], "little") & 0x3FFF
            return width, int.from_bytes(head[28:30], "little") & 0x3FFF
        if chunk == b"VP8L":
            b0, b1, b2, b3 = head[21:25]
            width = 1 + (((b1 & 0x3F) << 8) | b0)
            return width, 1 + (((b3 & 0x0F) << 10) | (b2 << 2) | ((b1 & 0xC0) >> 6))
    return None


def image_dimensions(base64_payload: str) -> tuple[int, int] | None:
    """Width and height read from an encoded image's header (PNG, GIF, BMP, WebP, JPEG), as the reference
    measures inline images before pricing them; ``None`` when the bytes are not a recognised image."""
    head = _b64decode(base64_payload[:64])
    if head is None:
        return None
    if head.startswith(b"\xff\xd8"):
        # a JPEG's frame header can sit after arbitrarily large metadata segments
        data = _b64decode(base64_payload)
        size = _jpeg_size(data) if data is not None else None
    else:
        size = _header_size(head)
    if size is None or size[0] <= 0 or size[1] <= 0:
        return None
    return size


def _js_round(value: float) -> int:
    return math.floor(value + 0.5)


@dataclass(frozen=True, slots=True)
class _OpenAIImagePricing:
    base: int
    tile: int
    fallback_tiles: int


_GEMINI_3_IMAGE_TOKENS = {"low": 280, "medium": 560, "high": 1120, "ultra_high": 2240, "unspecified": 1120}
_GOOGLE_LEGACY_TOKENS_PER_TILE = 258
_ANTHROPIC_MAX_LONG_EDGE = 1568
_KIB = 1024
_MIB = 1024 * 1024


def _openai_pricing(model_id: str) -> _OpenAIImagePricing:
    if model_id.startswith("gpt-5"):
        return _OpenAIImagePricing(70, 140, 4)
    if model_id.startswith("gpt-4o-mini"):
        return _OpenAIImagePricing(2833, 5667, 1)
    if model_id.startswith(("o1", "o3")):
        return _OpenAIImagePricing(75, 150, 4)
    if "computer-use" in model_id:
        return _OpenAIImagePricing(65, 129, 4)
    return _OpenAIImagePricing(85, 170, 4)


def _size_bucket(size_bytes: int, buckets: tuple[int, int, int, int]) -> int:
    if size_bytes <= 512 * _KIB:
        return buckets[0]
    if size_bytes <= 2 * _MIB:
        return buckets[1]
    if size_bytes <= 4 * _MIB:
        return buckets[2]
    return buckets[3]


def _openai_high_detail_tiles(
    width: int | None, height: int | None, size_bytes: int | None, fallback_tiles: int
) -> int:
    if width and height:
        scaled_w, scaled_h = float(width), float(height)
        longest = max(scaled_w, scaled_h)
        if longest > 2048:
            ratio = 2048 / longest
            scaled_w *= ratio
            scaled_h *= ratio
        shortest = min(scaled_w, scaled_h)
        if shortest > 768:
            ratio = 768 / shortest
            scaled_w *= ratio
            scaled_h *= ratio
        w, h = max(1, _js_round(scaled_w)), max(1, _js_round(scaled_h))
        return max(1, math.ceil(w / 512) * math.ceil(h / 512))
    if size_bytes is not None:
        return _size_bucket(size_bytes, (1, 4, 6, 8))
    return fallback_tiles


def _anthropic_image_tokens(width: int | None, height: int | None, size_bytes: int | None) -> int:
    if width and height:
        longest = max(width, height)
        if longest > _ANTHROPIC_MAX_LONG_EDGE:
            ratio = _ANTHROPIC_MAX_LONG_EDGE / longest
            width, height = max(1, _js_round(width * ratio)), max(1, _js_round(height * ratio))
        return max(1, math.ceil(width * height / 750))
    if size_bytes is not None:
        return _size_bucket(size_bytes, (341, 1366, 2048, 2731))
    return 1600


def _pretty_json(value: Any) -> str:
    return json.dumps(_strip_encrypted_content(value), indent=2, ensure_ascii=False, default=str)


def _compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _strip_encrypted_content(value: Any) -> Any:
    """Provider-encrypted blobs (reasoning state) never reach the model as text; count a short stand-in."""
    if isinstance(value, Mapping):
        return {
            key: f"[stripped encryptedContent: {len(entry)} characters]"
            if key == "encryptedContent" and isinstance(entry, str) and len(entry) > 256
            else _strip_encrypted_content(entry)
            for key, entry in value.items()
        }
    if isinstance(value, list | tuple):
        return [_strip_encrypted_content(item) for item in value]
    return value


def _js_truthy(value: Any) -> bool:
    if value is None or value is False or value == "":
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value != 0 and not math.isnan(value)
    return True


def _mapping_path(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


class TokenCounter:
    """Mastra's ``TokenCounter`` over any tokenizer: its message and conversation totals and its
    provider-aware attachment heuristics (docs/semantics.md, Counting tokens), for the provider of
    ``provider_model`` (``"openai/gpt-5-mini"``; ``None`` or an unknown provider prices images like OpenAI's
    defaults)."""

    def __init__(self, tokenizer: Tokenizer, provider_model: str | None = None) -> None:
        self.tokenizer = tokenizer
        provider, slash, model_id = (provider_model or "").partition("/")
        if not slash:
            provider, model_id = "", provider
        self.provider = provider.lower() or None
        self.model_id = model_id.lower()
        self._openai_pricing = _openai_pricing(self.model_id)

    def count_text(self, text: str) -> int:
        return self.tokenizer.count(text) if text else 0

    def count_messages(self, messages: Iterable[Message]) -> int:
        total = 0
        counted = False
        for message in messages:
            total += self.count_message(message)
            counted = True
        return TOKENS_PER_CONVERSATION + total if counted else 0

    def count_message(self, message: Message) -> int:
        payload = self.count_text(message.role)
        overhead = TOKENS_PER_MESSAGE
        extra_messages = 0
        for part in message.parts:
            if isinstance(part, TextPart):
                payload += self.count_text(part.text)
            elif isinstance(part, ImagePart):
                payload += self._image_part_tokens(part)
            elif isinstance(part, FilePart):
                payload += self._file_part_tokens(part)
            elif isinstance(part, ToolInvocationPart):
                tokens, overhead_delta, extra = self._tool_tokens(part)
                payload += tokens
                overhead += overhead_delta
                extra_messages += extra
            # reasoning and data-* parts count 0: they never reach the model as prompt text
        if extra_messages:
            overhead += extra_messages * TOKENS_PER_MESSAGE
        return _js_round(payload + overhead)

    # --- attachments ---

    def _image_part_tokens(self, part: ImagePart) -> int:
        if part.token_estimate is not None:
            return part.token_estimate
        asset = _asset(part.url, bare_is_base64=False)
        size = part.size_bytes if part.size_bytes is not None else asset.size_bytes
        return self._image_tokens(
            asset,
            size,
            detail=part.detail,
            width=part.width,
            height=part.height,
            resolution=part.media_resolution,
        )

    def _file_part_tokens(self, part: FilePart) -> int:
        if part.token_estimate is not None:
            return part.token_estimate
        asset = _asset(part.url, bare_is_base64=False)
        size = part.size_bytes if part.size_bytes is not None else asset.size_bytes
        return self._file_tokens(asset, size, part.mime_type, part.url, part.filename)

    def _file_tokens(
        self, asset: _Asset, size_bytes: int | None, mime_type: str | None, url: str, filename: str | None
    ) -> int:
        if _is_image_like_file(mime_type, url, filename):
            return self._image_tokens(
                asset, size_bytes, detail=None, width=None, height=None, resolution=None
            )
        if size_bytes is not None:
            return self._file_tokens_from_bytes(mime_type or "", size_bytes)
        descriptor = {
            "type": "file",
            "mimeType": mime_type or None,
            "filename": (filename.strip() if filename and filename.strip() else None) or _url_filename(url),
        }
        return self.count_text(_compact_json(descriptor))

    def _file_tokens_from_bytes(self, mime_type: str, size_bytes: int) -> int:
        mime = mime_type.lower().split(";", 1)[0].strip()
        if mime == "application/pdf":
            if self.provider == "google":
                return max(258, math.ceil(size_bytes / 20))
            if self.provider == "anthropic":
                return max(1500, math.ceil(size_bytes / 3))
            return max(500, math.ceil(size_bytes / 4))
        # text-ish and unknown binaries are priced alike; unknown errs upward so observation still fires
        return max(1, math.ceil(size_bytes / 4))

    def _image_tokens(
        self,
        asset: _Asset,
        size_bytes: int | None,
        *,
        detail: str | None,
        width: int | None,
        height: int | None,
        resolution: str | None,
    ) -> int:
        if self.provider == "google" and self.model_id.startswith("gemini-3"):
            return _GEMINI_3_IMAGE_TOKENS.get(
                resolution or "unspecified", _GEMINI_3_IMAGE_TOKENS["unspecified"]
            )
        if (not width or not height) and asset.base64_payload is not None:
            measured = image_dimensions(asset.base64_payload)
            if measured is not None:
                width, height = width or measured[0], height or measured[1]
        if self.provider == "google":
            tiles = math.ceil(width / 768) * math.ceil(height / 768) if width and height else 1
            return max(1, tiles) * _GOOGLE_LEGACY_TOKENS_PER_TILE
        if self.provider == "anthropic":
            return _anthropic_image_tokens(width, height, size_bytes)
        pricing = self._openai_pricing
        if detail not in ("low", "high"):
            if width and height:
                detail = "high" if max(width, height) > 768 else "low"
            elif size_bytes is not None:
                detail = "high" if size_bytes > _MIB else "low"
            else:
                detail = "low"
        if detail == "low":
            return pricing.base
        tiles = _openai_high_detail_tiles(width, height, size_bytes, pricing.fallback_tiles)
        return pricing.base + tiles * pricing.tile

    # --- tool invocations ---

    def _tool_tokens(self, part: ToolInvocationPart) -> tuple[int, int, int]:
        """(tokens, overhead delta, extra provider messages) of one tool invocation."""
        tokens = 0
        overhead_delta = 0
        if _js_truthy(part.tool_name):
            tokens += self.count_text(part.tool_name)
        if _js_truthy(part.args):
            if isinstance(part.args, str):
                tokens += self.count_text(part.args)
            else:
                tokens += self.count_text(_compact_json(part.args))
                overhead_delta -= OBJECT_PAYLOAD_DISCOUNT
        reason = _mapping_path(part.approval, "reason")
        if part.state in ("call", "partial-call", "approval-requested"):
            return tokens, overhead_delta, 0
        if part.state == "approval-responded":
            if isinstance(reason, str):
                tokens += self.count_text(reason)
            return tokens, overhead_delta, 1
        if part.state == "output-denied":
            tokens += self.count_text(reason if isinstance(reason, str) and reason else DEFAULT_DENIAL_REASON)
            return tokens, overhead_delta, 1
        if part.state == "error":
            tokens += self.count_text(part.error if part.error is not None else DEFAULT_TOOL_ERROR)
            return tokens, overhead_delta, 1
        result = part.result
        if result is None or result == "":
            return tokens + self.count_text(EMPTY_TOOL_RESULT), overhead_delta, 1
        multimodal = self._multimodal_result_tokens(result)
        if multimodal is not None:
            tokens += multimodal
        else:
            tokens += self.count_text(result if isinstance(result, str) else _pretty_json(result))
        if not isinstance(result, str):
            overhead_delta -= OBJECT_PAYLOAD_DISCOUNT
        return tokens, overhead_delta, 1

    def _multimodal_result_tokens(self, result: Any) -> int | None:
        """Tool outputs carrying images or files (``{type:'content', value:[...]}`` or ``{content:[...]}``)
        are priced with the attachment rules; ``None`` when there is no attachment to price."""
        if not isinstance(result, Mapping):
            return None
        value = result.get("value")
        content = (
            value if result.get("type") == "content" and isinstance(value, list) else result.get("content")
        )
        if not isinstance(content, list):
            return None
        has_attachment = False
        tokens = 0
        for item in content:
            if not isinstance(item, Mapping):
                continue
            kind = item.get("type")
            media_type = item.get("mediaType") or item.get("mimeType")
            mime = media_type if isinstance(media_type, str) else None
            data = item.get("data")
            if kind == "text":
                text = item.get("text") if isinstance(item.get("text"), str) else item.get("value")
                tokens += self.count_text(
                    "" if text is None else text if isinstance(text, str) else str(text)
                )
                continue
            is_image = kind in ("image", "image-data") or (
                kind == "media" and (mime or "").startswith("image/")
            )
            if not (is_image or kind in ("audio", "file-data", "media")) or not isinstance(data, str):
                tokens += self.count_text(_pretty_json(item))
                continue
            has_attachment = True
            try:
                estimate = client_token_estimate(item.get("providerMetadata"))
            except ValueError:
                estimate = None
            if estimate is not None:
                tokens += estimate
                continue
            asset = _asset(data, bare_is_base64=True)
            if is_image:
                detail = _mapping_path(item, "providerOptions", "openai", "detail")
                tokens += self._image_tokens(
                    asset,
                    asset.size_bytes,
                    detail=detail if isinstance(detail, str) else None,
                    width=None,
                    height=None,
                    resolution=None,
                )
            else:
                filename = item.get("filename")
                tokens += self._file_tokens(
                    asset, asset.size_bytes, mime, data, filename if isinstance(filename, str) else None
                )
        return tokens if has_attachment else None
