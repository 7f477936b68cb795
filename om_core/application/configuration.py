"""The configuration a record runs under: the server profile with the thread's overrides, parsed once."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from om_core.domain.config import MemoryConfig, merge_config_layers, parse_memory_config
from om_core.domain.identity_memo import IdentityMemo
from om_core.domain.state import RecordState
from om_core.domain.tokens import TokenCounter, Tokenizer, make_tokenizer


def profile_scope(profile: Mapping[str, Any]) -> str:
    return _profile_config(profile).scope


@lru_cache(maxsize=256)
def _parse_cached(canonical: str) -> MemoryConfig:
    return parse_memory_config(json.loads(canonical))


# A record without overrides runs under its profile as loaded, an object that lives as long as the process
# (the deployment's profiles) or the request (a tenant's, read anew each time). Merging and encoding it
# again to find it in the parse cache cost more than the rest of deciding what an append leads to, so the
# object itself is the key: an entry keeps it (its id cannot be reused meanwhile) with a copy of its
# options, and a hit is a profile equal to that copy, so one changed in place is parsed again.
_BY_PROFILE: IdentityMemo[MemoryConfig] = IdentityMemo(64)


def record_config(profile: Mapping[str, Any], state: RecordState) -> MemoryConfig:
    """The server profile with the thread's own overrides on top."""
    if state.config_overrides:
        merged = merge_config_layers(profile, state.config_overrides)
        return _parse_cached(json.dumps(merged, sort_keys=True))
    return _profile_config(profile)


def _profile_config(profile: Mapping[str, Any]) -> MemoryConfig:
    config = _BY_PROFILE.get(profile, profile)
    if config is None:
        config = _parse_cached(json.dumps(merge_config_layers(profile), sort_keys=True))
        _BY_PROFILE.put(profile, copy.deepcopy(dict(profile)), config)
    return config


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
