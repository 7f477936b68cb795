"""The configuration a record runs under: the server profile with the thread's overrides, parsed once."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from om_core.domain.config import MemoryConfig, merge_config_layers, parse_memory_config
from om_core.domain.state import RecordState
from om_core.domain.tokens import TokenCounter, Tokenizer, make_tokenizer


def profile_scope(profile: Mapping[str, Any]) -> str:
    return _parse_cached(json.dumps(dict(profile), sort_keys=True)).scope


@lru_cache(maxsize=256)
def _parse_cached(canonical: str) -> MemoryConfig:
    return parse_memory_config(json.loads(canonical))


def record_config(profile: Mapping[str, Any], state: RecordState) -> MemoryConfig:
    """The server profile with the thread's own overrides on top."""
    merged = merge_config_layers(profile, state.config_overrides)
    return _parse_cached(json.dumps(merged, sort_keys=True))


@lru_cache(maxsize=16)
def _tokenizer(tokenizer_spec: str) -> Tokenizer:
    return make_tokenizer(tokenizer_spec)


@lru_cache(maxsize=64)
def token_counter(tokenizer_spec: str, provider_model: str | None = None) -> TokenCounter:
    return TokenCounter(_tokenizer(tokenizer_spec), provider_model)


def counter_for(config: MemoryConfig, model: str | None = None) -> TokenCounter:
    """The configured tokenizer, pricing images and files for ``model``'s provider (OpenAI's prices when
    ``None`` or unknown): the model the counted messages will be sent to."""
    return token_counter(config.tokenizer, model)
